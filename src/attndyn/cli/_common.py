"""The shared pieces of the command line, by concern, in one place to import from:

- :mod:`._options`: the options' declarations and parsing, 0.4's flags;
- :mod:`._checks`: the options as typed objects (``ModelSpec``, ``MonteCarlo``), and the
  refusal of flags the run would ignore;
- :mod:`._runtime`: the process (devices, compilation cache, multi-host);
- :mod:`._results`: the output folder, the files written and the report;
- :mod:`._errors`: one line for every failure, never a traceback.

A command loads its study when it runs through :func:`attndyn._lazy.attach`, as the
packages do.

Each name is re-exported here (``from ._common import …`` keeps working).
"""

from ._checks import (
    SCHEME_OPTIONS as SCHEME_OPTIONS,
    SDE_IGNORES as SDE_IGNORES,
    check_engine_flags as check_engine_flags,
    check_scheme_flags as check_scheme_flags,
    depth_conflicts as depth_conflicts,
    model_spec as model_spec,
    monte_carlo as monte_carlo,
    refuse_unused as refuse_unused,
)
from ._errors import (
    cli_errors as cli_errors,
    one_line_warnings as one_line_warnings,
    run_failure as run_failure,
    storage_message as storage_message,
)
from ._options import (
    CACHE_OPTIONS as CACHE_OPTIONS,
    MULTI_HOST_OPTIONS as MULTI_HOST_OPTIONS,
    AbsorptionBound as AbsorptionBound,
    EnvironmentInt as EnvironmentInt,
    alpha_option as alpha_option,
    attention_option as attention_option,
    cache_options as cache_options,
    command_options as command_options,
    deprecated_option as deprecated_option,
    depth_option as depth_option,
    engine_option as engine_option,
    floats as floats,
    given as given,
    ints as ints,
    multi_host_options as multi_host_options,
    names as names,
    nonempty_path as nonempty_path,
    norm_option as norm_option,
    overwrite_option as overwrite_option,
    scale_options as scale_options,
    scheme_option as scheme_option,
    study_options as study_options,
    tau_option as tau_option,
)
from ._results import (
    command_line as command_line,
    emit_json as emit_json,
    finish as finish,
    output_bytes as output_bytes,
    png_metadata as png_metadata,
    save_png as save_png,
    say as say,
    say_resolved as say_resolved,
    study_checkpoint as study_checkpoint,
    study_metadata as study_metadata,
    study_output as study_output,
    warn_merged as warn_merged,
)
from ._runtime import (
    cacheable_solves as cacheable_solves,
    start_processes as start_processes,
    use_cache as use_cache,
)
