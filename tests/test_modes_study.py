"""The modes study and ``attndyn modes``: CF metadata and provenance, the same numbers
whatever the chunk size and across an interruption, bad input refused by name, the
figures; and (slow) the measured growth rates against the theory at N = 4,096."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn.cli import main
from attndyn.studies import ModesRun, ModesSpec, modes as modes_module, modes_points, modes_study

# N = 400: 6 trajectories a call (modes.tile_size), so 14 trajectories are 3 calls.
SMALL = ["--n-tokens", "400", "--dim", "2", "--beta", "9", "--horizon", "0.2", "--saves", "3"]
SMALL += ["--n-trajectories", "14", "--ell-max", "6", "--no-progress"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("modes")
    result = CliRunner().invoke(main, ["modes", *SMALL, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_dataset_carries_cf_metadata_and_provenance(cli_run):
    out, payload = cli_run
    with xr.open_dataset(out / "modes.nc") as ds:
        assert ds.attrs["Conventions"] == "CF-1.10"
        assert ds.attrs["title"].startswith("attndyn modes")
        assert ds.attrs["history"].split(": ", 1)[1].startswith("attndyn")
        for name in [*ds.data_vars, *ds.coords]:
            assert ds[name].attrs.get("units") and ds[name].attrs.get("long_name"), name
        record = ad.provenance(ds)
        assert record["study"] == record["kind"] == "modes" and record["n_trajectories"] == 14
        assert record["arguments"]["n_tokens"] == "400"
        assert ds["n_clusters_trajectory"].dtype.kind == "i"
        # At t = 0 the mode powers of uniform tokens are ~1/N (a loose check of the
        # pipeline; the law is tested in test_many_tokens).
        assert 0.2 < float(ds["mode_power"].isel(time=0, ell=slice(1, None)).mean()) * 400 < 5
    assert (out / "modes.png").stat().st_size > 10_000
    point = payload["points"][0]
    assert point["ell_star"] == ad.theory.most_unstable_degree(9.0, 2, depth=100, n_tokens=400)


# The study of SMALL through the API (the CLI fixture's compiled programs serve it).
SPEC = ModesSpec(horizon=0.2, saves=3)
POINTS = modes_points(dims=[2], n_tokens=[400], betas=[9.0])
SAME = ("mode_power_trajectory", "n_clusters_trajectory", "log_energy", "min_distance")


def _same_as_the_cli_run(cli_run, ds) -> None:
    out, _ = cli_run
    with xr.open_dataset(out / "modes.nc") as whole:
        for name in SAME:
            np.testing.assert_array_equal(ds[name].values, whole[name].values, err_msg=name)


def test_same_numbers_whatever_the_chunk_size_and_across_an_interruption(
    cli_run, tmp_path, monkeypatch
):
    run = ModesRun(n_trajectories=14, ell_max=6, chunk_size=1)
    calls = {"n": 0}
    real = modes_module._observe_saves

    def stop_in_the_second_tile(*args, **kwargs):  # one call a tile: call 2 is tile 2's
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    checkpoint = tmp_path / "modes.checkpoint.nc"
    monkeypatch.setattr(modes_module, "_observe_saves", stop_in_the_second_tile)
    with pytest.raises(KeyboardInterrupt):
        modes_study(SPEC, run, POINTS, checkpoint=checkpoint, progress=False)
    assert checkpoint.exists()
    monkeypatch.setattr(modes_module, "_observe_saves", real)
    resumed = modes_study(SPEC, run, POINTS, checkpoint=checkpoint, progress=False)
    _same_as_the_cli_run(cli_run, resumed)
    # A checkpoint of another study is refused, naming the file.
    other = ModesRun(n_trajectories=14, ell_max=5)
    with pytest.raises(ad.ParameterError, match="another modes study"):
        modes_study(SPEC, other, POINTS, checkpoint=checkpoint, progress=False)


def test_two_processes_give_the_one_process_numbers(cli_run, monkeypatch):
    """The study as each of two processes runs it (jax.distributed's layout faked: each
    runs its block of tiles, [0, 6) and [6, 14), and the gather hands process 0 both
    processes' rows): process 0's dataset has every number of the one-process CLI run.
    tests/test_distributed.py runs two real processes (slow)."""
    from attndyn._estimate import observables

    own = {}

    def gather(fields):
        own[layout[0]] = [np.array(f) for f in fields]
        return [own.get(0, own[layout[0]]), own.get(1, own[layout[0]])]

    monkeypatch.setattr(observables, "gather_parts", gather)
    run = ModesRun(n_trajectories=14, ell_max=6)
    for layout in ((1, 2), (0, 2)):
        monkeypatch.setattr(observables, "process_layout", lambda layout=layout: layout)
        ds = modes_study(SPEC, run, POINTS, progress=False)
    _same_as_the_cli_run(cli_run, ds)
    # Each process ran its own block only (n_done: the fields' second to last).
    assert [int(own[p][-2][0]) for p in (0, 1)] == [6, 8]
    assert json.loads(ds.attrs["provenance"])["process_count"] == 1  # faked: jax's is 1


@pytest.mark.parametrize("size", [1, 7])
def test_same_numbers_whatever_the_blocks_of_layers(cli_run, monkeypatch, size):
    """The 20 layers of each tile in blocks of 1 or 7 layers (the CLI run sized them by
    time: one block) give every number of the CLI run, bit for bit: each block runs the
    same compiled program, so a Ctrl-C between blocks and a resume change nothing."""
    from attndyn.studies import _modes_cost

    blocks = []

    def fixed(first: int) -> _modes_cost.LayerBlocks:
        del first
        blocks.append(_modes_cost.FixedBlocks(size))
        return blocks[-1]

    advanced = []
    real = modes_module._advance_tile

    def count(model, state, noise, start, stop):
        advanced.append((int(start), int(stop)))
        return real(model, state, noise, start, stop)

    monkeypatch.setattr(modes_module, "LayerBlocks", fixed)
    monkeypatch.setattr(modes_module, "_advance_tile", count)
    ds = modes_study(SPEC, ModesRun(n_trajectories=14, ell_max=6), POINTS, progress=False)
    _same_as_the_cli_run(cli_run, ds)
    # 3 tiles of 20 layers, each cut into blocks of `size` layers (the last one shorter).
    per_tile = [(a, min(a + size, 20)) for a in range(0, 20, size)]
    assert advanced == per_tile * 3


def test_ctrl_c_during_a_long_compiled_call_stops_at_once(monkeypatch, tmp_path, cli_run):
    """A Ctrl-C while a block of layers runs is raised within a poll of the call
    (:mod:`attndyn.studies._modes_calls`), not when the call ends (a layer of 65,536
    tokens takes seconds on the direct route, and a tile ran as one call); the checkpoint
    is written and the run resumes to the numbers of an uninterrupted one. The first
    block is made to look unfinished for 3 s (its arrays report not ready: no CPU spent;
    the slow test runs a real one), and SIGINT comes 0.3 s into it."""
    import signal
    import threading
    import time

    from attndyn.studies import _modes_calls

    real_ready, real_advance = _modes_calls._ready, modes_module._advance_tile
    state = {}

    def first_block_is_slow(*args):
        out = real_advance(*args)
        if not state:
            state["busy"] = {id(leaf) for leaf in jax.tree.leaves(out)}
            state["until"] = time.monotonic() + 3.0
            state["sent"] = time.monotonic() + 0.3
            main = threading.main_thread().ident or 0
            threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()
        return out

    def ready(leaf):
        if id(leaf) in state.get("busy", ()) and time.monotonic() < state["until"]:
            return False
        return real_ready(leaf)

    monkeypatch.setattr(modes_module, "_advance_tile", first_block_is_slow)
    monkeypatch.setattr(_modes_calls, "_ready", ready)
    checkpoint = tmp_path / "modes.checkpoint.nc"
    run = ModesRun(n_trajectories=14, ell_max=6)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            modes_study(SPEC, run, POINTS, checkpoint=checkpoint, progress=False)
        stopped_in = time.monotonic() - state["sent"]
    finally:
        signal.signal(signal.SIGINT, previous)
    # Within a poll (≤ 50 ms) and the checkpoint write; the "call" alone lasts 3 s. On a
    # loaded 2-core machine allow 2 s.
    assert stopped_in < 2.0, stopped_in
    assert _modes_calls.work_in_flight()  # the CLI then exits without waiting for it
    assert checkpoint.exists()
    monkeypatch.setattr(modes_module, "_advance_tile", real_advance)
    monkeypatch.setattr(_modes_calls, "_ready", real_ready)
    assert not _modes_calls.work_in_flight()
    resumed = modes_study(SPEC, run, POINTS, checkpoint=checkpoint, progress=False)
    _same_as_the_cli_run(cli_run, resumed)


def test_ctrl_c_while_a_call_compiles_stops_at_once(monkeypatch, tmp_path):
    """A Ctrl-C while a call is traced and compiled (tens of seconds for the observables
    of 65,536 tokens; XLA never returns to Python meanwhile) is raised within a poll: the
    call is dispatched from a worker thread. Here the dispatch of the first block sleeps
    2 s in that thread (no CPU) and SIGINT comes 0.2 s into it."""
    import signal
    import threading
    import time

    from attndyn.studies import _modes_calls

    real_advance = modes_module._advance_tile
    state = {}

    def slow_to_compile(*args):
        if not state:
            state["sent"] = time.monotonic() + 0.2
            main = threading.main_thread().ident or 0
            threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT)).start()
            time.sleep(2.0)
        return real_advance(*args)

    monkeypatch.setattr(modes_module, "_advance_tile", slow_to_compile)
    run = ModesRun(n_trajectories=14, ell_max=6)
    checkpoint = tmp_path / "modes.checkpoint.nc"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            modes_study(SPEC, run, POINTS, checkpoint=checkpoint, progress=False)
        stopped_in = time.monotonic() - state["sent"]
    finally:
        signal.signal(signal.SIGINT, previous)
    # Within a poll and the checkpoint write; the dispatch alone lasts 2 s.
    assert stopped_in < 1.5, stopped_in
    assert _modes_calls.work_in_flight() and checkpoint.exists()
    deadline = time.monotonic() + 30
    while _modes_calls.work_in_flight():  # the call ends in the background
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--n-tokens", "1"], "n_tokens"),
        (["--beta", "-1"], "beta"),
        (["--beta", "2", "--gamma", "1"], "--gamma"),
        (["--eps", "0.5"], "--noise scalar"),
        (["--noise", "matrix", "--engine", "sde"], "matrix"),
        (["--n-trajectories", "1"], "trajectories"),
        (["--ell-max", "0"], "ell_max"),
        (["--saves", "1"], "saves"),
        (["--implementation", "library", "--attention", "unnormalized"], "softmax"),
        # Issue 42: each ran (or was ignored) before.
        (["--norm", "layernorm"], "dim=2 must be an integer >= 3 with norm='layernorm'"),
        (["--engine", "sde", "--depth", "50"], "--depth applies to --engine discrete only"),
        (["--dt", "0.01"], "--dt applies to --engine sde only"),
        (["--dt", "0.02"], "--dt applies to --engine sde only"),
        (["--step", "0.1", "--depth", "20"], "--depth and --step both set"),
        (["--engine", "sde", "--step", "0.1"], "--step applies to --engine discrete only"),
        # Past float32's overflow: refused before running, advising --x64, which modes has.
        (["--beta", "100", "--attention", "unnormalized", "--scheme", "pre-ln"], "--x64"),
        # ℓ* ≈ 1,414 is past the 512 degrees a study computes: refused before running.
        (["--beta", "1e6"], "ell_max"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, match):
    result = CliRunner().invoke(main, ["modes", *SMALL, *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--norm", "layernorm", "--dim", "2"],
        ["--engine", "sde", "--depth", "50"],
        ["--dt", "0.01"],
        ["--step", "0.1", "--depth", "20"],
    ],
)
def test_modes_refuses_as_phase_diagram_does(tmp_path, args):
    """The same refusal, word for word, as phase-diagram's (issue 42: modes ran these)."""
    lines = []
    # modes with SMALL's sizes: a regression runs seconds, not the default study.
    for command, extra in (("modes", SMALL), ("phase-diagram", ["--beta", "1", "--dim", "3"])):
        result = CliRunner().invoke(
            main, [command, *extra, *args, "--out", str(tmp_path / command), "--no-cache"]
        )
        assert result.exit_code == 2, result.output
        lines.append(result.output.strip().split(" (see '")[0])
    assert lines[0] == lines[1]


def test_an_interrupt_exits_at_once_with_the_usual_line(monkeypatch, tmp_path):
    """Ctrl-C: status 130 and the line every command prints, by ``os._exit`` (a compiled
    call may still run: the interpreter's exit waited for it, seconds to minutes at large
    N, or crashed with SIGSEGV). ``os._exit`` is replaced here, since it would end the
    test runner; the slow test below sends a real SIGINT to a real run."""
    from attndyn.cli import _modes

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    exits = []

    def hard_exit(status):
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(_modes, "modes_study", interrupted)
    monkeypatch.setattr(_modes, "_hard_exit", hard_exit)
    result = CliRunner().invoke(main, ["modes", *SMALL, "--out", str(tmp_path / "o")])
    assert result.exit_code == 130 and exits == [130], result.output
    assert result.output.strip() == _modes.INTERRUPTED
    # The words of every command's Ctrl-C (cli_errors), here through phase-diagram's.
    from attndyn.cli import _phase

    monkeypatch.setattr(_phase, "phase_diagram_study", interrupted)
    args = ["phase-diagram", "--beta", "1", "--dim", "3", "--out", str(tmp_path / "p")]
    other = CliRunner().invoke(main, [*args, "--no-progress", "--no-cache"])
    assert other.exit_code == 130 and other.output.strip() == _modes.INTERRUPTED


def _checked(cls, **values):
    """``cls(**values)`` as a user's Python meets it: the tests' jaxtyping hook type-checks
    the dataclass's constructor (a TypeCheckError before attndyn's own checks), so the
    fields are set directly and its ``__post_init__`` checks them."""
    made = object.__new__(cls)
    for field in dataclasses.fields(cls):
        object.__setattr__(made, field.name, values.get(field.name, field.default))
    made.__post_init__()
    return made


@pytest.mark.parametrize(
    ("cls", "values", "name"),
    [
        (ModesSpec, {"horizon": "12"}, "horizon="),
        (ModesSpec, {"step": "0.1"}, "step="),
        (ModesSpec, {"engine": "sde", "dt": "0.1"}, "dt="),
        (ModesSpec, {"engine": "sde", "depth": 50}, "depth=50 applies to engine='discrete'"),
        (ModesSpec, {"step": 0.1, "depth": 20}, "give depth .* or step .*, not both"),
        (ModesRun, {"tol": "0.1"}, "tol="),
        (ModesRun, {"x64": "yes"}, "x64="),
    ],
)
def test_the_specs_refuse_bad_values_by_name(cls, values, name):
    # horizon='12' reached NumPy's isfinite: a TypeError naming nothing; depth with the
    # sde engine or beside step was recorded and ignored.
    _checked(cls)  # the defaults pass
    with pytest.raises(ad.ParameterError, match=name):
        _checked(cls, **values)


def test_layernorm_needs_three_dimensions_in_the_api_too():
    with pytest.raises(ad.ParameterError, match="dim=2 must be an integer >= 3"):
        ModesSpec(norm="layernorm").model(beta=1.0, dim=2, n_tokens=8)
    ModesSpec(norm="layernorm").model(beta=1.0, dim=3, n_tokens=8)


def test_x64_runs_what_float32_refuses():
    """Unnormalised attention at β = 100 under Pre-LN overflows float32 (refused before
    running, advising --x64) and not float64 (limit 354.9)."""
    spec = ModesSpec(attention="unnormalized", scheme="pre-ln")
    points = modes_points(dims=[2], n_tokens=[16], betas=[100.0])
    with pytest.raises(ad.ParameterError, match="x64"):
        modes_module.check_study(spec, ModesRun(), points)
    models, _ = modes_module.check_study(spec, ModesRun(x64=True), points)
    assert models[0].attention.beta.dtype == np.float64  # type: ignore[attr-defined]


def test_ell_max_reaches_the_most_unstable_degree():
    """ℓ* beyond ℓ_max made the figure fail after the run (IndexError): ℓ_max is raised
    to ℓ* + 1 with a warning that says so, and refused past 512, before anything runs."""
    spec = ModesSpec()
    points = modes_points(dims=[2], n_tokens=[64], betas=[4.0, 200.0])
    star = ad.theory.most_unstable_degree(200.0, 2, depth=100, n_tokens=64)
    assert star > 16
    with pytest.warns(UserWarning, match=f"raised to {star + 1}"):
        assert modes_module.ell_max_for(spec, ModesRun(), points) == star + 1
    assert modes_module.ell_max_for(spec, ModesRun(ell_max=star + 5), points) == star + 5
    huge = modes_points(dims=[2], n_tokens=[64], betas=[1e6])
    with pytest.raises(ad.ParameterError, match="ell_max"):
        modes_module.ell_max_for(spec, ModesRun(), huge)


def test_the_figure_says_when_ell_star_was_not_computed():
    """A dataset whose ℓ* lies past its degrees (made before ℓ_max was raised to it) is
    drawn, saying so, instead of failing with an IndexError."""
    ds = _fake(ModesSpec(horizon=1.0, saves=11), modes_points(dims=[2], n_tokens=[64], betas=[4.0]))
    ds["ell_star"] = ds["ell_star"] * 0 + 40
    fig = ad.plot.modes(ds)
    texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert "ℓ* = 40 is not among the degrees computed (ℓ ≤ 5)" in texts


@pytest.mark.parametrize("dim", [2, 3, 10, 343, 344, 1000, 4096])
def test_auto_tol_at_any_dimension(dim):
    """Γ(d/2) overflowed from d = 344 (OverflowError); in logarithms the tolerance is
    finite, in (0, 10⁻³], and where Γ is finite the formula's value."""
    tol = modes_module.auto_tol(4096, dim)
    assert 0 < tol <= 1e-3
    if dim < 344:
        area = 2 * math.pi ** (dim / 2) / math.gamma(dim / 2)
        direct = min(1e-3, (0.1 * (area / 4096) ** (1 / (dim - 1))) ** 2 / 2)
        assert tol == pytest.approx(direct, rel=1e-12)


def test_a_long_run_is_announced_before_it_starts(monkeypatch):
    """N = 2²⁴ tokens (the issue's example, accepted with no word) in d = 4 (direct
    attention: N² d a layer): one warning with the estimated time before anything runs;
    in d = 3 (the spectral route's attention, and since issue 43 no pairs in the
    observables on S² either: 4.5 s a save of 10⁶ tokens) and the default study, none."""
    from attndyn._estimate import study
    from attndyn.studies import _modes_cost

    def refuse_to_run(self, *args):
        raise RuntimeError("stopped before running")

    monkeypatch.setattr(study.Study, "run", refuse_to_run)
    spec = ModesSpec(horizon=4.0, depth=10, saves=2)
    # d = 4: 1,473 days.
    huge = modes_points(dims=[4], n_tokens=[1 << 24], betas=[4.0])
    with pytest.warns(_modes_cost.CostWarning, match="estimated at [0-9.,]+ days"):
        with pytest.raises(RuntimeError, match="stopped before running"):
            modes_study(spec, ModesRun(n_trajectories=2), huge, progress=False)
    # d = 3: minutes (it announced 3 days for a run of 10⁶ tokens that took 8 CPU minutes).
    sphere = modes_points(dims=[3], n_tokens=[1 << 24], betas=[4.0])
    seconds = _modes_cost.study_seconds(
        [spec.model(**sphere[0])],
        sphere,
        n_run=[2],
        n_saves=2,
        ell_max=16,
        dtype=np.dtype("float32"),
    )
    assert 60 < seconds < _modes_cost.WARN_SECONDS
    default = modes_points(dims=[2], n_tokens=[4096], betas=[4.0, 9.0, 16.0])
    models = [ModesSpec().model(**p) for p in default]
    seconds = _modes_cost.study_seconds(
        models, default, n_run=[8] * 3, n_saves=121, ell_max=16, dtype=np.dtype("float32")
    )
    assert _modes_cost.cost_warning(seconds, default[0]) is None


def _fake(spec: ModesSpec, points, seed: int = 0) -> xr.Dataset:
    """A modes dataset from made-up observables (through the study's own analysis): the
    figures need its variables, not a simulation."""
    from attndyn.studies._modes_analysis import analyse, attach_cf

    rng = np.random.default_rng(seed)
    run = ModesRun(n_trajectories=3, ell_max=5)
    times = np.linspace(0, spec.horizon, spec.saves)
    fields = modes_module.observed_fields(5, 7)
    arrays = {
        name: np.full((len(points), 3, len(times), *f.shape), f.fill, f.dtype)
        for name, f in fields.items()
    }
    shape = arrays["n_clusters"].shape
    arrays["n_clusters"][:] = rng.integers(1, 20, shape)
    arrays["largest"][:] = rng.integers(1, 64, shape)
    growth = np.exp(np.outer(times, np.arange(6)))[None, None] / 64
    arrays["mode_power"][:] = growth * rng.uniform(0.5, 2, (*shape[:2], 1, 6))
    arrays["log_energy"][:] = rng.normal(size=shape)
    arrays["min_distance"][:] = rng.uniform(size=shape)
    raw = modes_module.raw_dataset(arrays, np.full(len(points), 3))
    ds = analyse(raw, spec, run, points, times)
    ds.attrs["provenance"] = json.dumps({"n_trajectories": 3, "engine": "discrete"})
    return attach_cf(ds, spec)


def test_the_three_figures_fit_and_explain_their_marks():
    """The modes, noise and long-context figures: at most 1,600 px wide at the CLI's 130
    dpi, with a legend."""
    spec = ModesSpec(horizon=1.0, saves=11)
    noisy = ModesSpec(horizon=1.0, saves=11, noise="matrix")
    levels = modes_points(dims=[2], n_tokens=[64], betas=[4.0], levels=[0, 0.5], level_name="sigma")
    datasets = [
        _fake(spec, modes_points(dims=[2, 3], n_tokens=[64], betas=[4.0, 9.0])),
        _fake(noisy, levels),
        _fake(spec, modes_points(dims=[8], n_tokens=[16, 32], gammas=[0.5, 1.5])),
    ]
    for ds in datasets:
        fig = ad.plot.modes(ds)
        assert fig.get_figwidth() * 130 <= 1600
        assert fig.legends or any(ax.get_legend() for ax in fig.axes)


def test_the_plateau_marks_say_how_many_trajectories_reached_it():
    """The plateau mark averages only the trajectories that reached the plateau: each
    point's clusters panel says k/n, k from the dataset (n_plateau_reached: gathered is
    not reached), in the panel's legend."""
    ds = _fake(
        ModesSpec(horizon=1.0, saves=11), modes_points(dims=[2], n_tokens=[64], betas=[4.0, 9.0])
    )
    fig = ad.plot.modes(ds)
    legends = [legend for ax in fig.axes if (legend := ax.get_legend()) is not None]
    texts = [t.get_text() for legend in legends for t in legend.texts]
    n = ds.sizes["trajectory"]
    for beta, k in zip(ds["beta"].values, ds["n_plateau_reached"].values, strict=True):
        line = f"β = {beta:g}, N = 64: plateau reached {int(k)}/{n}"
        assert any(t == line or t.startswith(f"{line}, ") for t in texts), (line, texts)


@pytest.mark.slow
@pytest.mark.parametrize(("dim", "beta"), [(2, 9.0), (3, 9.0)])
def test_measured_growth_rates_agree_with_the_theory(dim, beta):
    """N = 4,096 uniform tokens, softmax, Post-LN, L = 100: every degree in its linear
    window grows at 2λ_ℓ within 4 standard errors (the errors are the spread of 8
    trajectories' fitted slopes), and the fastest of them is ℓ*. About 5 min of CPU each
    (docs/guides/many-tokens.md lists the full table)."""
    spec = ModesSpec(horizon=2.5, saves=51, depth=100)
    run = ModesRun(n_trajectories=8, ell_max=12)
    ds = modes_study(
        spec, run, modes_points(dims=[dim], n_tokens=[4096], betas=[beta]), progress=False
    )
    row = ds.isel(point=0)
    linear = row["linear"].values.astype(bool)
    assert linear[1 : int(row["ell_star"]) + 2].all()  # ℓ* and its neighbours are fitted
    gap = np.abs(row["growth_rate"].values - row["growth_rate_theory"].values)
    assert np.all(gap[linear] <= 4 * row["growth_rate_se"].values[linear]), (
        row["growth_rate"].values,
        row["growth_rate_theory"].values,
    )
    assert int(row["ell_star_measured"]) == int(row["ell_star"])
    assert math.isfinite(float(row["window_end"])) and float(row["window_end"]) > 0.3


@pytest.mark.slow
def test_ctrl_c_stops_the_command_line_within_seconds_at_large_n(tmp_path):
    """The issue's run at d = 3 (each save's observables are pair sums of 65,536 tokens,
    seconds each; the layers, too, took seconds on the direct route): SIGINT 20 s in
    exits with status 130 within 10 s (at 9f5b4a1: 145 s), with the checkpoint written
    and the usual line. About 25 s of wall time."""
    import os
    import signal
    import subprocess
    import sys
    import time

    args = ["modes", "--n-trajectories", "2", "--horizon", "10", "--depth", "10"]
    args += ["--saves", "2", "--n-tokens", "65536", "--dim", "3", "--beta", "4"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    process = subprocess.Popen(
        [sys.executable, "-c", "from attndyn.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**env, "JAX_PLATFORMS": "cpu"},
    )
    time.sleep(20)
    assert process.poll() is None, process.communicate()[1][-2000:]
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    stopped_in = time.monotonic() - sent
    assert process.returncode == 130, err[-2000:]
    assert stopped_in < 10, stopped_in
    assert err.strip().splitlines()[-1].startswith("Interrupted. Rerun the same command")
    assert (tmp_path / "attndyn-results" / "modes.checkpoint.nc").exists()


def test_json_gives_every_degree_with_its_flag_and_names_the_theory(cli_run):
    """``--json`` ``rates``: every degree ℓ = 1 … ℓ_max, fitted or not, with its SE, its
    driven flag (null where not fitted) and 2λ_ℓ as ``theory_power_rate``, the growth
    rate of P_ℓ (the layer maps' at L = 100, N = 400); ``theory``, its deprecated name,
    holds the same number for one release."""
    _, payload = cli_run
    rates = payload["points"][0]["rates"]
    assert [r["ell"] for r in rates] == list(range(1, 7))
    for r in rates:
        assert {"rate", "se", "theory_power_rate", "theory", "driven", "bend_p_holm"} <= set(r)
        expected = 2 * ad.theory.mode_growth_rate(9.0, 2, r["ell"], depth=100, n_tokens=400)
        assert r["theory_power_rate"] == pytest.approx(float(expected), rel=1e-12)
        assert r["theory"] == r["theory_power_rate"]
        assert r["driven"] is None if r["rate"] is None else isinstance(r["driven"], bool)
    point = payload["points"][0]
    assert {"n_plateau_reached", "plateau_reached_clusters", "plateau_hold"} <= set(point)


def test_plateau_marks_only_where_half_reached_and_none_hides_another():
    """Two points that reached the same count at the same time get two different shapes
    at two different places on the page; a point that under half of its trajectories
    reached gets no mark, and its legend line says so."""
    ds = _fake(
        ModesSpec(horizon=1.0, saves=11),
        modes_points(dims=[2], n_tokens=[64], betas=[4.0, 9.0, 16.0]),
    )
    ds["n_plateau_reached"][:] = [2, 3, 1]  # of 3 trajectories: the third under half
    ds["plateau_reached_at"][:] = 0.5
    ds["plateau_reached_clusters"][:] = 4.0
    fig = ad.plot.modes(ds)
    fig.canvas.draw()
    ax = next(a for a in fig.axes if a.get_legend() is not None)
    marks = [line for line in ax.lines if line.get_marker() in ("s", "D", "^", "v", "p", "h")]
    assert len(marks) == 2
    assert marks[0].get_marker() != marks[1].get_marker()
    places = [line.get_transform().transform(line.get_xydata())[0] for line in marks]
    assert abs(places[0][0] - places[1][0]) >= 3  # display pixels apart
    legend = ax.get_legend()
    assert legend is not None
    texts = [t.get_text() for t in legend.texts]
    assert "β = 16, N = 64: plateau reached 1/3, under half: not marked" in texts
