"""Typed study functions behind the CLI: phase diagrams, evolution in time, the schemes,
the modes of many tokens, and the rate fits.

Each takes its parameters as Python values (no parsing, no printing) and returns an
``xarray.Dataset`` with provenance; the CLI only parses options and writes files.

Every name is loaded on first use (:mod:`attndyn._lazy`): the command line declares its
options without importing JAX.
"""

from typing import TYPE_CHECKING

from .._lazy import attach as _attach

if TYPE_CHECKING:
    from .evolution import (
        MODELS as MODELS,
        evolution_points as evolution_points,
        evolution_study as evolution_study,
    )
    from .mean_field import (
        mean_field_modes as mean_field_modes,
        mean_field_points as mean_field_points,
        mean_field_summary as mean_field_summary,
    )
    from .metastable import (
        PLATEAU_FACTOR as PLATEAU_FACTOR,
        Plateau as Plateau,
        plateau_summary as plateau_summary,
        plateaus as plateaus,
    )
    from .modes import (
        ModesRun as ModesRun,
        ModesSpec as ModesSpec,
        auto_tol as auto_tol,
        modes_points as modes_points,
        modes_study as modes_study,
        modes_summary as modes_summary,
    )
    from .phase import (
        DEFAULT_ATTENTION as DEFAULT_ATTENTION,
        DIAGRAMS as DIAGRAMS,
        ENGINES as ENGINES,
        ModelSpec as ModelSpec,
        MonteCarlo as MonteCarlo,
        phase_diagram_study as phase_diagram_study,
        phase_model as phase_model,
        phase_points as phase_points,
    )
    from .rates import (
        RATE_LAWS as RATE_LAWS,
        RateFit as RateFit,
        clustering_time as clustering_time,
        cosine_gap as cosine_gap,
        fit_terminal_rate as fit_terminal_rate,
    )
    from .schemes import (
        random_weights_cosine as random_weights_cosine,
        schemes_study as schemes_study,
        schemes_summary as schemes_summary,
        terminal_fit as terminal_fit,
    )
    from .spec import (
        SDE as SDE,
        Discrete as Discrete,
        MatrixNoise as MatrixNoise,
        NoNoise as NoNoise,
        ScalarNoise as ScalarNoise,
        StudyModel as StudyModel,
    )
    from .summary import json_points as json_points, series as series

# 0.4's names, read with a DeprecationWarning for one release.
__getattr__, __dir__ = _attach(
    __name__, __file__, globals(), deprecated={"KINDS": "DIAGRAMS", "RATE_KINDS": "RATE_LAWS"}
)
