"""Many tokens: the modes of the uniform state, its clusters and its metastable plateau
(spec §7) as a typed study; the CLI's ``attndyn modes`` calls :func:`modes_study`.

N tokens start i.i.d. uniform on S^{d−1} and move under any attention, scheme and value
noise the engine has. At every save time each trajectory gives the observables of
:mod:`attndyn._core.many_tokens` (cluster count, largest cluster, cluster-size histogram,
mode powers P_ℓ, log interaction energy, minimum distance); the dataset keeps them per
trajectory and their means with standard errors across trajectories, beside the theory of
the uniform state (:func:`attndyn.theory.mode_growth_rate`), the growth rates fitted over
each point's linear window and the plateau statistics (:mod:`._modes_analysis`).

The trajectories run on the estimator's loop, as the phase diagram's do
(:func:`attndyn._estimate.observables.estimate_observables`: tiles, checkpoint and resume,
lock, several processes, progress bar, Ctrl-C); this module says how one tile runs
(:class:`_Tiles`) and what it observes (:func:`observed_fields`).

Randomness: trajectory i of a point starts from, and draws its noise from,
``fold_in(fold_in(key(seed), point_id), i)`` (:mod:`attndyn._estimate.keys`); every call
runs a fixed number of trajectories (a tile that depends on N only), and each
trajectory's observables are kept in its own row, so the numbers never depend on the
chunk size (a chunk is a number of tiles between checkpoints), a resume or the number of
processes.

Ctrl-C. A tile's layers run in blocks of compiled calls (:class:`._modes_cost.LayerBlocks`:
about half a second each, the first sized from an estimate of a layer's cost), then its
saves' observables one call a save; every call is dispatched from a worker thread and
awaited by polling (:mod:`._modes_calls`), so a Ctrl-C is raised within ~50 ms even while
a call compiles or runs. Every block runs the same compiled program, so the numbers never
depend on the blocks either. A run estimated long is announced before it starts
(:func:`._modes_cost.cost_warning`).
"""

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from .._core import defaults
from .._core.attention import ATTENTION_KINDS, Attention
from .._core.errors import (
    INT32_MAX,
    ParameterError,
    check_bool,
    check_bound,
    check_choice,
    check_int,
    check_real,
    check_seed,
    check_sequence,
)
from .._core.many_tokens import many_token_observables, size_bins
from .._core.norms import NORM_NAMES
from .._core.renamed import old_attribute, renamed
from .._core.schemes import SCHEME_NAMES
from .._core.sphere import uniform_sphere
from .._core.values import DISTRIBUTIONS
from .._estimate.dataset import attach_provenance, provenance_record, study_fields
from .._estimate.diagnose import overflow_message, overflow_refusal
from .._estimate.observables import estimate_observables
from .._estimate.observations import Field
from .._estimate.plan import check_distinct
from .._io import interrupts
from .._models.base import AbstractModel
from . import _modes_cost as cost
from ._modes_analysis import analyse, attach_cf, modes_summary, theory_ell_star
from ._modes_calls import async_jit, run_call
from ._modes_cost import LayerBlocks
from ._names import ENGINES as STUDY_ENGINES, MODES_NOISES
from .spec import NOISE_CLASSES, StudyModel, engine_of

__all__ = ["ModesRun", "ModesSpec", "auto_tol", "modes_points", "modes_study", "modes_summary"]

#: The value noise of a modes study, added to the attention flow V = I/L: none; scalar
#: (seed 003 eq. 7, V_n = (1/L + ε v_n/√L)·I); matrix (V_n = I/L + σ M_n/√L, seed 003's
#: matrix noise with the drift of the flow).
NOISES = MODES_NOISES
ENGINES = STUDY_ENGINES
MAX_SAVES = 10_000
MAX_TOKENS = 1 << 24
#: The largest ℓ_max a study computes (mode powers cost N·ℓ² on S², N²·ℓ above).
ELL_MAX_LIMIT = 512
#: Trajectories per call for small N (a call holds at most ~2²⁰ pairs a trajectory … ):
#: ``max(1, min(TILE_MAX, 2²⁰ // N²))``; one trajectory a call from N = 1,024.
TILE_MAX = 8


def tile_size(n_tokens: int) -> int:
    """Trajectories one compiled call runs together: depends on N only, so a trajectory's
    numbers never depend on how many run beside it or on the chunk size."""
    return int(max(1, min(TILE_MAX, (1 << 20) // (n_tokens * n_tokens))))


@dataclasses.dataclass(frozen=True)
class ModesSpec:
    """Which model every point of a modes study runs (its point supplies β, d, N and the
    noise level).

    ``engine="discrete"``: the depth-L layer maps of ``scheme`` (t = n/L, or a real
    ``step`` η); ``"sde"``: the depth limit, seed 003's hybrid SDE (scalar noise ε, ε = 0
    the attention flow), Post-LN only. ``noise`` is added to the flow (:data:`NOISES`).
    ``implementation``: how attention is computed (``auto`` attends in blocks above 2,048
    tokens)."""

    attention: str = defaults.ATTENTION
    scheme: str = defaults.SCHEME
    norm: str = defaults.NORM
    noise: str = defaults.STUDY_DEFAULTS["noise"]["modes"]
    values: str | None = None
    engine: str = defaults.ENGINE
    depth: int = defaults.DEPTH
    step: float | None = None
    horizon: float = defaults.horizon_of("modes")
    saves: int = defaults.STUDY_DEFAULTS["saves"]["modes"]
    solver: str = defaults.SOLVER
    dt: float = defaults.DT
    implementation: str = defaults.IMPLEMENTATION

    def __post_init__(self):
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_choice("scheme", self.scheme, SCHEME_NAMES)
        check_choice("norm", self.norm, NORM_NAMES)
        check_choice("noise", self.noise, NOISES)
        check_choice("engine", self.engine, ENGINES)
        if self.values is not None:
            check_choice("values", self.values, DISTRIBUTIONS)
        check_int("depth", self.depth, lower=1, upper=INT32_MAX)
        # A real number first: a string reached NumPy's isfinite and failed there with a
        # TypeError that named nothing (ModesSpec(horizon='12')).
        check_real("horizon", self.horizon)
        check_bound("horizon", self.horizon, lower=0.0, lower_open=True)
        check_int("saves", self.saves, lower=2, upper=MAX_SAVES)
        if self.step is not None:
            check_real("step", self.step)
            check_bound("step", self.step, lower=0.0, lower_open=True)
        check_real("dt", self.dt)
        Attention(1.0, implementation=self.implementation)  # validates the name
        # Which engine takes which field, and which noise an engine can run, is the study
        # spec's to say (engine_of, StudyModel): built once here, refused there.
        self._check_unused(self.study_model().engine)

    def _check_unused(self, engine) -> None:
        """Fields the engine would ignore (recorded, never used): refused."""
        if engine.has_layers:
            if self.step is not None and self.depth != defaults.DEPTH:
                # Both set the layer step: one would be ignored while the record kept both.
                raise ParameterError("give depth (layers per unit time) or step (η), not both.")
            return
        if self.values is not None:
            raise ParameterError(
                f"values={self.values!r} applies to engine='discrete' only; the "
                f"{engine.name} engine's noise is a Brownian motion."
            )
        if self.depth != defaults.DEPTH:
            raise ParameterError(
                f"depth={self.depth} applies to engine='discrete' only; the {engine.name} "
                "engine steps by dt (leave depth at its default, or choose engine='discrete')."
            )

    save_at = old_attribute("save_at", "saveat", "ModesSpec")  # 0.4's name

    @property
    def saveat(self) -> tuple[float, ...]:
        """The save times: ``saves`` evenly spaced times in [0, T]."""
        return tuple(np.linspace(0.0, self.horizon, self.saves).tolist())

    def model(self, *, beta: float, dim: int, n_tokens: int, level: float = 0.0) -> AbstractModel:
        """The model of one point: β, d, N and the noise level (ε or σ), built by the
        study spec (:class:`.spec.StudyModel`, :meth:`study_model`)."""
        check_int("dim", dim, lower=2)
        key = self.level_name
        built = self.study_model()
        return built.model(beta=beta, dim=dim, n_tokens=n_tokens, **({key: level} if key else {}))

    def study_model(self) -> StudyModel:
        """This spec as the studies' model spec: its engine by name, its noise added to
        the flow V = I/L (:meth:`.spec.AbstractNoise.added_to_flow`), each point's level
        under the noise's point key. Built once."""
        built = self.__dict__.get("_study_model")
        if built is None:
            engine = engine_of(
                self.engine, depth=self.depth, step=self.step, solver=self.solver, dt=self.dt
            )
            built = StudyModel(
                engine=engine,
                noise=NOISE_CLASSES[self.noise].added_to_flow(law=self.values),
                attention=self.attention,
                scheme=self.scheme,
                norm=self.norm,
                horizon=self.horizon,
                saveat=self.saveat,
                implementation=self.implementation,
            )
            object.__setattr__(self, "_study_model", built)
        return built

    @property
    def level_name(self) -> str | None:
        """The point key of the noise level: ``eps`` (scalar), ``sigma`` (matrix), none."""
        return NOISE_CLASSES[self.noise].added_to_flow(law=None).point_level()

    def metadata(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        built = self.study_model()
        record["values"] = built.engine.value_law(built.noise)
        record["model_equation"] = (
            "seed 003 eq. 8 (hybrid SDE; eps = 0: the attention flow)"
            if not built.engine.has_layers
            else f"{self.scheme} layer maps, V_n = I/L" + FLOW_TERMS[self.noise]
        )
        return record


#: What each noise adds to the flow V_n = I/L, as the provenance's ``model_equation``
#: writes it.
FLOW_TERMS = {"none": "", "scalar": " + eps v_n/sqrt(L) I", "matrix": " + sigma M_n/sqrt(L)"}


@renamed(trajectories="n_trajectories")
@dataclasses.dataclass(frozen=True)
class ModesRun:
    """How a modes study is sampled: trajectories per point, seed, clustering tolerance,
    the largest degree ℓ_max of the mode powers, trajectories per checkpoint
    (``chunk_size``, never changes the numbers), and the float type (``x64``: float64
    states and observables, for unnormalised attention at a β whose weights overflow
    float32 under a scheme that needs them whole, or to resolve clusters below float32's
    ~10⁻⁷).

    ``tol=None`` (the default) picks each point's tolerance from its N and d
    (:func:`auto_tol`): small enough that the uniform start is not one chain of touching
    tokens. ``ell_max`` below a point's most unstable degree ℓ* (theory) is raised to
    ℓ* + 2, with a warning (:func:`ell_max_for`)."""

    n_trajectories: int = defaults.STUDY_DEFAULTS["n_trajectories"]["modes"]
    seed: int = defaults.SEED
    tol: float | None = None
    ell_max: int = defaults.ELL_MAX
    chunk_size: int | None = None
    x64: bool = False

    def __post_init__(self):
        # Two at least: every estimate carries a standard error across trajectories.
        check_int("n_trajectories", self.n_trajectories, lower=2, upper=1 << 20)
        check_seed("seed", self.seed)
        if self.tol is not None:
            check_real("tol", self.tol)
            check_bound("tol", self.tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
        check_int("ell_max", self.ell_max, lower=1, upper=ELL_MAX_LIMIT)
        if self.chunk_size is not None:
            check_int("chunk_size", self.chunk_size, lower=1, upper=1 << 20)
        check_bool("x64", self.x64)

    def tol_for(self, n_tokens: int, dim: int) -> float:
        """The clustering tolerance of a point: ``tol``, or :func:`auto_tol`."""
        return auto_tol(n_tokens, dim) if self.tol is None else self.tol


def auto_tol(n_tokens: int, dim: int) -> float:
    """The clustering tolerance for N uniform tokens on S^{d−1}: tokens are joined when
    |θ_i − θ_j| ≤ √(2 tol), and this makes that distance a tenth of the typical spacing
    s = (|S^{d−1}|/N)^{1/(d−1)} (at most 10⁻³, the seeds' tolerance). With 10⁻³ itself
    4,096 tokens on a circle (spacing 1.5·10⁻³ rad against a reach of 0.045) touch in one
    chain that spans the circle and count as one cluster before any has formed; with this
    tolerance the uniform start has about N clusters, and the count falls to the number of
    clusters as they contract (exponentially fast) below it. N = 4,096: 1.2·10⁻⁸ on S¹,
    1.5·10⁻⁵ on S².

    In logarithms (``lgamma``): Γ(d/2) overflows a float from d = 344, and |S^{d−1}|
    underflows from d ≈ 1,400; the spacing itself tends to √(2π e/d)·N^{−1/(d−1)}."""
    check_int("n_tokens", n_tokens, lower=2)
    check_int("dim", dim, lower=2)
    log_area = math.log(2) + (dim / 2) * math.log(math.pi) - math.lgamma(dim / 2)
    spacing = math.exp((log_area - math.log(n_tokens)) / (dim - 1))
    return float(min(1e-3, (0.1 * spacing) ** 2 / 2))


@renamed(tokens="n_tokens")
def modes_points(
    *,
    dims: Sequence[int],
    n_tokens: Sequence[int],
    betas: Sequence[float | int] = (),
    gammas: Sequence[float | int] = (),
    levels: Sequence[float | int] = (0.0,),
    level_name: str | None = None,
) -> list[dict[str, Any]]:
    """The grid: (d, N, β[, level]) from ``betas``, or (d, N, γ, β = γ log N[, level]) from
    ``gammas`` (the long-context scaling of Chen, Lin, Polyanskiy, Rigollet), one of the
    two. ``level_name`` (``eps`` or ``sigma``) names the noise level axis; without it the
    levels must be ``(0,)``. Values are written as floats, as the CLI writes them."""
    for name, values in (("dims", dims), ("n_tokens", n_tokens), ("levels", levels)):
        check_sequence(name, values)
    if bool(len(betas)) == bool(len(gammas)):
        raise ParameterError("give beta values or gamma values (beta = gamma log N), one of them.")
    for d in dims:
        check_int("dim", d, lower=2, upper=4096)
    for n in n_tokens:
        check_int("n_tokens", n, lower=2, upper=MAX_TOKENS)
    for name, values in (("beta", betas), ("gamma", gammas)):
        for value in values:
            check_bound(name, float(value), lower=0.0, lower_open=True)
    for value in levels:
        check_bound(level_name or "noise level", float(value), lower=0.0)
    if level_name is None and any(float(v) != 0 for v in levels):
        raise ParameterError("noise levels need noise='scalar' (eps) or 'matrix' (sigma).")
    points = []
    for d in dims:
        for n in n_tokens:
            scales = [("beta", float(b)) for b in betas] or [("gamma", float(g)) for g in gammas]
            for name, value in scales:
                for level in levels:
                    p: dict[str, Any] = {"dim": int(d), "n_tokens": int(n)}
                    if name == "gamma":
                        p.update(gamma=value, beta=value * math.log(n))
                    else:
                        p["beta"] = value
                    if level_name is not None:
                        p[level_name] = float(level)
                    points.append(p)
    check_distinct(points)
    return points


def _point_model(spec: ModesSpec, point: Mapping[str, Any]) -> AbstractModel:
    level = point.get(spec.level_name or "", 0.0)
    return spec.model(beta=point["beta"], dim=point["dim"], n_tokens=point["n_tokens"], level=level)


def _begin(model: AbstractModel, keys, *, n_tokens: int, dim: int, dtype):
    """The model's state before its first layer for one tile of trajectories, and their
    noise keys (each trajectory: its start from the first half of its key, its noise from
    the second). A model without layers to split (the SDE engine) runs whole here."""

    def split(key):
        start, noise = jax.random.split(key)
        return uniform_sphere(key=start, n_tokens=n_tokens, dim=dim, dtype=dtype), noise

    x0, noise = jax.vmap(split)(keys)
    return model.begin(x0, noise), noise


def _advance(model: AbstractModel, state, noise, start, stop):
    """Layers ``[start, stop)`` of a tile (int32 scalars, traced: one compiled program for
    every block, so a layer's numbers never depend on where the blocks are cut)."""
    return model.advance(state, noise, start, stop)


_begin_tile = async_jit(_begin, n_tokens=int, dim=int, dtype=np.dtype)
# The state (every save of the tile so far: 11 saves of 10⁶ tokens on S² are 132 MB) is
# donated: copied into new memory at every block, it was 14 M page faults and a third of
# the CPU of the 10⁶-token S² run.
_advance_tile = async_jit(_advance, donate=(0,))


@functools.partial(jax.jit, static_argnames=("ell_max",))
def _observe_saves(x, beta, tol, ell_max: int):
    """The observables of a group of saves of every trajectory of a tile (``x``: ``(tile,
    G, N, d)``), and whether its states are finite: one compiled program for every group
    of a point (the last group is padded to G)."""
    finite = jnp.all(jnp.isfinite(x), axis=(-2, -1))

    def one(c):
        return many_token_observables(c, beta=beta, tol=tol, ell_max=ell_max)

    observed = jax.vmap(lambda saves: jax.lax.map(one, saves))(x)
    return observed, finite


def simulate_tile(
    model: AbstractModel, keys, n_tokens: int, dim: int, blocks: LayerBlocks, on_block=None
):
    """The saves of one tile, ``(tile, S, N, d)``: the model's layers a block at a time
    (``blocks`` sizes them from the measured seconds), each block waited for
    (:func:`._modes_calls.run_call`: dispatched from a worker thread, awaited by polling)
    and followed by a check for Ctrl-C; ``on_block(layers)`` is told how
    many layers each block ran. A model without layers to split (the SDE engine: one
    diffrax solve) runs whole in its first call."""
    dtype = jnp.dtype(_dtype_name())
    state, noise = run_call(_begin_tile, model, keys, n_tokens=n_tokens, dim=dim, dtype=dtype)
    steps, multiple = model.stepping()
    del multiple  # every built-in layer map steps one layer at a time
    done = 0
    while done < steps:
        stop = blocks.next_stop(done, steps)
        started = time.perf_counter()
        state = run_call(_advance_tile, model, state, noise, jnp.int32(done), jnp.int32(stop))
        blocks.measured(stop - done, time.perf_counter() - started)
        if on_block is not None:
            on_block(stop - done)
        interrupts.check()
        done = stop
    return model.finish(state)  # the saves out of the state: no arithmetic


def observe_tile(saves, beta, tol, ell_max: int, group: int, on_save=None):
    """Every save's observables (stacked as ``(tile, S, …)``, the fields of
    :class:`attndyn._core.many_tokens.ManyTokenObservables`) and which trajectories stayed
    finite: ``group`` saves a call (:func:`._modes_cost.saves_per_call`, fixed by the
    point, so the same compiled program for every group), each call dispatched and
    awaited by :func:`._modes_calls.run_call`; ``on_save(k)`` is told how many saves each
    call observed."""
    n_saves = saves.shape[1]
    observed, finite = [], []
    for first in range(0, n_saves, group):
        count = min(group, n_saves - first)
        index = np.minimum(np.arange(first, first + group), n_saves - 1)  # padded
        result = run_call(_observe_saves, saves[:, index], beta, tol, ell_max)
        fields, ok = jax.device_get(result)
        observed.append(tuple(np.asarray(f)[:, :count] for f in fields))
        finite.append(np.asarray(ok)[:, :count])
        if on_save is not None:
            on_save(count)
        interrupts.check()
    stacked = tuple(np.concatenate(values, axis=1) for values in zip(*observed, strict=True))
    return stacked, np.all(np.concatenate(finite, axis=1), axis=1)


FIELDS = ("n_clusters", "largest", "histogram", "mode_power", "log_energy", "min_distance")


def observed_fields(ell_max: int, bins: int) -> dict[str, Field]:
    """What a tile observes per trajectory and save (:data:`FIELDS`): counts as int32,
    the rest float64 (NaN where a trajectory has not run)."""
    nan = float("nan")
    return {
        "n_clusters": Field("int32"),
        "largest": Field("int32"),
        "histogram": Field("int32", (bins,), dims=("size_bin",)),
        "mode_power": Field("float64", (ell_max + 1,), fill=nan, dims=("ell",)),
        "log_energy": Field("float64", fill=nan),
        "min_distance": Field("float64", fill=nan),
    }


def raw_dataset(arrays: Mapping[str, np.ndarray], n_done: np.ndarray) -> xr.Dataset:
    """The per-trajectory observables (:data:`FIELDS`, each ``(point, trajectory, time,
    …)``) as the dataset :func:`._modes_analysis.analyse` reads."""
    fields = observed_fields(arrays["mode_power"].shape[-1] - 1, arrays["histogram"].shape[-1])
    ds = xr.Dataset({name: (fields[name].axes(name), arrays[name]) for name in FIELDS})
    ds["n_done"] = ("point", np.asarray(n_done, np.int64))
    return ds


def _study_record(spec: ModesSpec, mc: ModesRun, ell_max: int) -> dict[str, Any]:
    """What determines the numbers besides the points, save times and key (the
    estimator's record, :func:`attndyn._estimate.observations.observations_record`): a
    checkpoint of any other record is refused."""
    fields = dataclasses.asdict(mc)
    del fields["chunk_size"]
    return {
        "kind": "modes",
        "spec": dataclasses.asdict(spec),
        "run": fields,
        "ell_max": ell_max,
        "dtype": _dtype_name(),
    }


def _dtype_name() -> str:
    return str(jnp.dtype(jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32))


def modes_study(
    spec: ModesSpec,
    mc: ModesRun,
    points: Sequence[Mapping[str, Any]],
    *,
    checkpoint: Path | None = None,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Simulate every point's trajectories, observe them at every save, and analyse them
    (:func:`._modes_analysis.analyse`): a CF-style dataset with provenance.

    Everything is checked before anything runs: every point's model (its dimension, and
    β where unnormalised attention would overflow the float type: :func:`_check_fits`),
    ℓ_max against each point's ℓ* (:func:`ell_max_for`); a run estimated above an hour
    on a 2-core CPU is announced with a warning (:mod:`._modes_cost`). ``mc.x64`` runs
    everything in float64.

    The trajectories run on the estimator's loop
    (:func:`attndyn._estimate.observables.estimate_observables`), as the phase diagram's
    do: with several processes (``jax.distributed``, :func:`attndyn.initialize_distributed`)
    each runs its block of every point's trajectories and every process returns the
    dataset of one process, bit for bit.

    ``checkpoint``: a netCDF path; finished trajectories are written there (atomically)
    every 20 s, after every chunk (``mc.chunk_size``; one tile by default) and after every
    point, and a rerun of the same study resumes from it (with any chunk size); a
    checkpoint of another study is refused. Ctrl-C stops the run within a block of layers
    (about half a second of work) or one save's observables, after writing the
    checkpoint."""
    if not points:
        raise ParameterError("points is empty; give at least one (d, N, beta) point.")
    with jax.enable_x64(mc.x64):
        return _modes_study(spec, mc, points, checkpoint, progress, metadata)


def check_study(
    spec: ModesSpec, mc: ModesRun, points: Sequence[Mapping[str, Any]], *, warn: bool = False
) -> tuple[list[AbstractModel], int]:
    """Every point's model, built (under ``mc.x64``: with float64 leaves) and checked
    (:func:`_check_fits`), and the study's ℓ_max (:func:`ell_max_for`; ``warn``: say so
    where it is raised): what :func:`modes_study` checks before it runs, for a caller (the
    CLI) that refuses bad input before it creates anything."""
    with jax.enable_x64(mc.x64):
        models = [_point_model(spec, p) for p in points]
        for model, p in zip(models, points, strict=True):
            _check_fits(model, p)
        return models, ell_max_for(spec, mc, points, warn=warn)


def _modes_study(spec, mc, points, checkpoint, progress, metadata) -> xr.Dataset:
    # Under x64 every model is built here, its leaves float64 from the values as given.
    models, ell_max = check_study(spec, mc, points, warn=True)
    save_times = np.asarray(models[0].save_times, np.float64)
    bins = size_bins(max(int(p["n_tokens"]) for p in points))
    tiles = [tile_size(int(p["n_tokens"])) for p in points]
    observations = estimate_observables(
        _Tiles(mc, points, models, ell_max),
        points,
        fields=observed_fields(ell_max, bins),
        tiles=tiles,
        key=jax.random.key(mc.seed),
        n_trajectories=mc.n_trajectories,
        save_times=save_times,
        record=_study_record(spec, mc, ell_max),
        checkpoint=checkpoint,
        chunk_size=mc.chunk_size,
        progress=progress,
        name="modes",
        nonfinite=lambda i: (
            f"a trajectory at {dict(points[i])} became NaN or infinite. "
            f"{overflow_message(models[i])}"
        ),
        on_start=functools.partial(_warn_cost, models, points, len(save_times), ell_max),
        # Moved by shares of a tile (_Tiles): 0.0476/2, not 0.047619047619047616/2.
        bar_options={
            "bar_format": "{desc}: {percentage:3.0f}%|{bar}| {n:.3g}/{total_fmt} "
            "[{elapsed}<{remaining}, {rate_fmt}]"
        },
    )
    raw = raw_dataset(observations.arrays, observations.n_done)
    ds = analyse(raw, spec, mc, points, save_times)
    fields = {
        **study_fields("modes"),
        **spec.metadata(),
        "seed": mc.seed,
        "n_trajectories": mc.n_trajectories,
        "tol": [mc.tol_for(int(p["n_tokens"]), int(p["dim"])) for p in points],
        "ell_max": ell_max,
        "dtype": _dtype_name(),
        "tile": tiles,
        "implementation": [
            m.attention.implementation_for(  # type: ignore[attr-defined]
                int(p["n_tokens"]), jnp.dtype(_dtype_name()), dim=int(p["dim"])
            )
            for m, p in zip(models, points, strict=True)
        ],
        "key_data": np.asarray(jax.random.key_data(jax.random.key(mc.seed))).tolist(),
        "devices": [str(d) for d in jax.local_devices()[:1]],
        "process_count": jax.process_count(),
        "runs": observations.runs,
        **(dict(metadata) if metadata else {}),
    }
    attach_provenance(ds, provenance_record(observations.seconds, **fields))
    return attach_cf(ds, spec, command=fields.get("command"))


def _check_fits(model: AbstractModel, point: Mapping[str, Any]) -> None:
    """Refuse, before anything runs, a point whose model does not fit its tokens, or whose
    unnormalised attention would overflow the float type wherever it goes (the refusal,
    and its advice, phase-diagram gives: :func:`attndyn._estimate.diagnose.overflow_refusal`)."""
    attention = getattr(model, "attention", None)
    if attention is not None:
        attention.check_dim(int(point["dim"]))
    dtype = np.dtype(_dtype_name())
    refusal = overflow_refusal(model, dtype, int(point["dim"]))
    if refusal is not None:
        raise ParameterError(f"at {dict(point)}: {refusal}.")


def ell_max_for(
    spec: ModesSpec, mc: ModesRun, points: Sequence[Mapping[str, Any]], *, warn: bool = True
) -> int:
    """The largest degree the study computes: ``mc.ell_max``, raised (with a warning) to
    ℓ* + 1 where a point's most unstable degree ℓ* (theory) is not below it, so that ℓ* and
    the degree past it are measured and drawn (the figure's ℓ* panels read them; beyond
    ℓ_max they failed after the run). Refused, before anything runs, past
    :data:`ELL_MAX_LIMIT`."""
    stars = [theory_ell_star(spec, p) for p in points]
    top = int(np.argmax(stars))
    needed = stars[top] + 1
    if needed <= mc.ell_max:
        return mc.ell_max
    if needed > ELL_MAX_LIMIT:
        raise ParameterError(
            f"ell_max: the most unstable degree of the theory at {dict(points[top])} is "
            f"ℓ* = {stars[top]}, beyond the largest degree a modes study computes "
            f"({ELL_MAX_LIMIT}); lower beta (ℓ* ≈ √(2β))."
        )
    if warn:
        warnings.warn(
            f"ell_max={mc.ell_max} (CLI: --ell-max) is below ℓ* + 1 = {needed}, the theory's most "
            f"unstable degree and the one past it at {dict(points[top])}: raised to {needed}.",
            stacklevel=4,
        )
    return needed


def _warn_cost(models, points, n_saves: int, ell_max: int, n_run: Sequence[int]) -> None:
    """One line before a long run (:func:`._modes_cost.cost_warning`): the work still to
    do (``n_run``: per point, the trajectories this process still runs, whole tiles),
    finished trajectories of a resumed run left out."""
    dtype = np.dtype(_dtype_name())
    seconds = cost.study_seconds(
        models, points, n_run=n_run, n_saves=n_saves, ell_max=ell_max, dtype=dtype
    )
    largest = max(points, key=lambda p: float(p["n_tokens"]) ** 2 * float(p["dim"]))
    cost.warn_cost(seconds, largest)


class _Tiles:
    """How one tile of a modes study runs (the estimator's ``run_tile``): its layers in
    blocks (:class:`._modes_cost.LayerBlocks`, per point), then its saves' observables;
    the progress bar moves by each part's estimated share of the tile's time."""

    def __init__(self, mc: ModesRun, points, models, ell_max: int):
        self.mc, self.points, self.models, self.ell_max = mc, points, models, ell_max
        self.blocks: dict[int, LayerBlocks] = {}

    def __call__(self, index: int, keys, count: int, bar) -> tuple[dict[str, Any], Any]:
        point, model = self.points[index], self.models[index]
        n_tokens, dim = int(point["n_tokens"]), int(point["dim"])
        dtype = jnp.float64 if self.mc.x64 else jnp.float32
        args = (
            jnp.asarray(point["beta"], dtype),
            jnp.asarray(self.mc.tol_for(n_tokens, dim), dtype),
        )
        if index not in self.blocks:
            layer = cost.attention_seconds(model, n_tokens, dim, dtype)
            self.blocks[index] = LayerBlocks(cost.first_block(len(keys) * layer))
        observed, finite = self.run_tile(
            model, keys, (n_tokens, dim), count, self.blocks[index], args, bar
        )
        values: dict[str, Any] = dict(zip(FIELDS, observed, strict=True))
        return values, finite

    def run_tile(self, model, keys, shape: tuple[int, int], count: int, blocks, args, bar):
        """One tile's observables and which trajectories stayed finite (``shape``: N and
        d; ``args``: β and the tolerance); the progress bar moves by the estimated share
        of the tile's time that each block of layers and each save's observables take
        (:mod:`._modes_cost`), so its rate and time left mean something at large N, where
        a tile is one trajectory (on the spectral route the observables' pair sums take
        most of it)."""
        n_tokens, dim = shape
        beta, tol = args
        layer = cost.attention_seconds(model, n_tokens, dim, np.dtype(_dtype_name()))
        save = cost.observe_seconds(n_tokens, dim, self.ell_max)
        steps, n_saves = int(model.stepping()[0]), len(model.save_times)
        unit = count / max(steps * layer + n_saves * save, 1e-12)
        group = cost.saves_per_call(save * len(keys), n_saves)
        saves = simulate_tile(
            model,
            keys,
            n_tokens,
            dim,
            blocks,
            on_block=lambda ran: bar.update(ran * layer * unit),
        )
        moved = lambda k: bar.update(k * save * unit)  # noqa: E731
        return observe_tile(saves, beta, tol, self.ell_max, group, on_save=moved)
