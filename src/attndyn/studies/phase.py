"""Phase diagrams of seed 003 (Figs. 3, 4, 6) as typed study functions.

The CLI's ``phase-diagram`` and ``evolution`` commands parse their options into a
:class:`ModelSpec` (which model) and a :class:`MonteCarlo` (how many trajectories, which
seed and route) and call :func:`phase_diagram_study` or
:func:`attndyn.studies.evolution_study`; a script can do the same.
"""

import copy
import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import numpy as np
import xarray as xr

from .._core import defaults
from .._core.errors import (
    ParameterError,
    check_bool,
    check_bound,
    check_choice,
    check_int,
    check_seed,
    check_sequence,
)
from .._core.renamed import renamed, translate
from .._core.saveat import SaveAt
from .._core.sphere import uniform_sphere
from .._estimate.dataset import study_fields
from .._estimate.estimator import estimate_checked
from .._estimate.plan import (
    MAX_DIM,
    MAX_TOKENS,
    BuiltModels,
    CheckedPoints,
    check_distinct,
    check_options,
    grid,
)
from .._io.metadata import describe, index_points
from .._models.base import ROUTES, AbstractModel
from ..theory import (
    EXACT_BETA_MAX,
    depth_for_step,
    effective_dim,
    hybrid_layer_step,
    p_antipodal_hybrid_uniform,
    p_antipodal_pair_three_tokens,
    p_antipodal_uniform,
)
from ..theory._hybrid import STEP_WARNING
from ._names import (
    DEFAULT_ATTENTION as DEFAULT_ATTENTION,
    DIAGRAMS as DIAGRAMS,
    ENGINES as ENGINES,
    NOISE_OF_DIAGRAM as NOISE_OF_DIAGRAM,
)
from .spec import NOISE_CLASSES, AbstractNoise, StudyModel, engine_of, noise_name

#: The keys every point of a diagram gives (:func:`phase_points`).
POINT_KEYS = {
    "beta-d": ("dim", "n_tokens", "beta"),
    "beta-eps": ("dim", "n_tokens", "eps", "beta"),
    "beta-n": ("dim", "n_tokens", "beta"),
}


@renamed(tokens="n_tokens", save_at="saveat")
def phase_model(
    *,
    beta: float,
    dim: int,
    n_tokens: int,
    eps: float | None = None,
    noise: str = defaults.NOISE,
    engine: str = defaults.ENGINE,
    attention: str = defaults.ATTENTION,
    values: str | None = None,
    sigma: float = defaults.SIGMA,
    depth: int = defaults.DEPTH,
    horizon: float | None = None,
    solver: str = defaults.SOLVER,
    dt: float = defaults.DT,
    saveat: tuple[float | int, ...] | None = None,
    norm: str = defaults.NORM,
    step: float | None = None,
    scheme: str = defaults.SCHEME,
    tau: float = defaults.TAU,
    alpha: float = defaults.ALPHA,
) -> AbstractModel:
    """The model of one phase-diagram point: :class:`ModelSpec`'s fields, and the point's
    β, d, N and ε.

    ``noise="matrix"``: Post-LN with full value noise (003 eq. 4) or its SDE (eq. 6);
    ``noise="scalar"``: scalar value noise ε (eq. 7) or its SDE (eq. 8);
    ``noise="none"``: deterministic values (ε = 0 of eq. 7; the ODE of Lemma 2 for the SDE
    engine, solved by the same fixed-step solver). 0.4's ``"full"`` and ``"hybrid"`` still
    read as ``"matrix"`` and ``"scalar"``, with a deprecation warning.

    ``values`` is the law of the value noise: by default Gaussian matrix entries (eq. 4, as
    in the paper's experiments) and Rademacher scalars v_n (eq. 7 assumes them bounded).
    ``norm="layernorm"``: Post-LN with centred LayerNorm (discrete engine; d ≥ 3), whose
    law is the RMS model's in d − 1 dimensions. ``step``: a real layer step η instead of
    ``depth`` (t = nη). ``horizon``: T (default: the phase diagram's,
    :data:`attndyn._core.defaults.HORIZON`); ``saveat``: the save times in [0, T] (default:
    T only). ``scheme``: the normalization scheme of the layer maps (seed 004; default
    Post-LN, the model of seed 003 and of its theory; discrete engine only), with Mix-LN's
    switch ``tau`` and nGPT's step ``alpha``.
    """
    spec = ModelSpec(
        noise=noise,
        engine=engine,
        attention=attention,
        values=values,
        sigma=sigma,
        depth=depth,
        horizon=horizon,
        solver=solver,
        dt=dt,
        saveat=saveat,
        norm=norm,
        step=step,
        scheme=scheme,
        tau=tau,
        alpha=alpha,
    )
    study = spec.for_study("phase-diagram").model
    return study.model(beta=beta, dim=dim, n_tokens=n_tokens, eps=eps)


@renamed(save_at="saveat")
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Which model every point of a study runs (its point supplies β, d, N and ε).

    The flat constructor, by name, of a :class:`attndyn.studies.spec.StudyModel` (an
    engine object, :class:`~attndyn.studies.spec.Discrete` or
    :class:`~attndyn.studies.spec.SDE`, and a noise object; :attr:`model`), kept as 0.5
    had it: it is API. Each field is checked once, by the object it enters.

    ``noise``: ``"matrix"`` (σ, seed 003 eq. 4 / eq. 6), ``"scalar"`` (ε from the points,
    eq. 7 / eq. 8) or ``"none"``; 0.4's ``"full"`` and ``"hybrid"`` are read as
    ``"matrix"`` and ``"scalar"`` with a deprecation warning (removed in 0.6).

    Every default is :mod:`attndyn._core.defaults`'s. ``horizon=None`` is the study's own
    (the phase diagram's T = 100, evolution's T = 50: ``defaults.HORIZON``). ``saveat``:
    the save times in [0, T], a tuple (default: T only); the spec holds the horizon
    itself, so it takes the times, not a :class:`attndyn.SaveAt` (which would give T
    twice); a ``SaveAt`` of the spec's horizon is read as its times. ``scheme``: the
    normalization scheme of the layer maps (default Post-LN; the others on the discrete
    engine), ``tau`` Mix-LN's switch and ``alpha`` nGPT's step (each only with its
    scheme)."""

    noise: str = defaults.NOISE
    engine: str = defaults.ENGINE
    attention: str = defaults.ATTENTION
    values: str | None = None
    sigma: float = defaults.SIGMA
    depth: int = defaults.DEPTH
    horizon: float | None = None
    solver: str = defaults.SOLVER
    dt: float = defaults.DT
    saveat: tuple[float | int, ...] | SaveAt | None = None
    norm: str = defaults.NORM
    step: float | None = None
    scheme: str = defaults.SCHEME
    tau: float = defaults.TAU
    alpha: float = defaults.ALPHA
    #: The model the fields describe (built, and so checked, once).
    model: StudyModel = dataclasses.field(init=False, repr=False, compare=False)
    #: The three noises with this spec's σ and value law, by name (evolution's models).
    noises: Mapping[str, AbstractNoise] = dataclasses.field(init=False, repr=False, compare=False)

    def study_horizon(self, study: str) -> float:
        """The horizon T, ``study``'s default where ``horizon=None``."""
        return defaults.horizon_of(study) if self.horizon is None else self.horizon

    def for_study(self, study: str) -> "ModelSpec":
        """This spec with ``horizon=None`` read as ``study``'s default horizon (the fields
        are not checked again: only T's own checks run)."""
        if self.horizon is not None:
            return self
        new = copy.copy(self)
        horizon = self.study_horizon(study)
        object.__setattr__(new, "horizon", horizon)
        object.__setattr__(new, "model", self.model.with_horizon(horizon))
        return new

    def with_saveat(self, saveat: tuple[float | int, ...]) -> "ModelSpec":
        """This spec (its horizon set: :meth:`for_study`) with the save times ``saveat``:
        only what depends on them is checked again."""
        if self.horizon is None:
            raise ParameterError("with_saveat needs the horizon: call for_study first.")
        new = copy.copy(self)
        object.__setattr__(new, "saveat", saveat)
        object.__setattr__(new, "model", self.model.with_horizon(self.horizon, saveat))
        return new

    def __post_init__(self):
        if isinstance(self.saveat, SaveAt):
            if self.horizon is not None and self.saveat.horizon != self.horizon:
                raise ParameterError(
                    f"saveat=SaveAt({self.saveat.horizon:g}, ...) has another horizon than "
                    f"horizon={self.horizon:g}; give the save times alone (saveat=(...))."
                )
            horizon = self.saveat.horizon if self.horizon is None else self.horizon
            object.__setattr__(self, "horizon", horizon)
            object.__setattr__(self, "saveat", None if self.saveat.ts is None else self.saveat.ts)
        object.__setattr__(self, "noise", noise_name(self.noise, stacklevel=5))
        engine = engine_of(
            self.engine, depth=self.depth, step=self.step, solver=self.solver, dt=self.dt
        )
        noises = {
            name: cls.of_fields(sigma=self.sigma, law=self.values)
            for name, cls in NOISE_CLASSES.items()
        }
        model = StudyModel(
            engine=engine,
            noise=noises[self.noise],
            attention=self.attention,
            scheme=self.scheme,
            norm=self.norm,
            horizon=self.horizon,
            saveat=self.saveat,  # type: ignore[arg-type]
            tau=self.tau,
            alpha=self.alpha,
        )
        object.__setattr__(self, "noises", noises)
        object.__setattr__(self, "model", model)

    def model_fn(self) -> Callable[..., AbstractModel]:
        """``model_fn(**point)`` for the estimator (the spec's horizon must be set:
        :meth:`for_study`)."""
        return self.model.model

    def metadata(self) -> dict[str, Any]:
        """Provenance of the model choice (:meth:`StudyModel.metadata`)."""
        return self.model.metadata()


#: The estimator's arguments as :class:`MonteCarlo` names them (in its refusals).
MONTE_CARLO_NAMES = {"chunk_size": "chunk-size", "early_absorption": "early-absorption"}


def _on_nonfinite(exclude: bool) -> str:
    """0.4's ``exclude_nonfinite`` flag as an ``on_nonfinite`` policy (a real bool, as 0.4
    required: a truthy ``"no"`` would switch it on)."""
    check_bool("exclude_nonfinite", exclude)
    return "exclude" if exclude else "raise"


@renamed(trajectories="n_trajectories", exclude_nonfinite=("on_nonfinite", _on_nonfinite))
@dataclasses.dataclass(frozen=True)
class MonteCarlo:
    """How a study is estimated: sample size, seed, tolerance and the estimator's options
    (defaults: :mod:`attndyn._core.defaults`)."""

    n_trajectories: int = defaults.N_TRAJECTORIES
    seed: int = defaults.SEED
    tol: float = defaults.TOL
    chunk_size: int | None = None
    route: str = "auto"
    #: A per-trajectory bound, ``"auto"`` (10⁻⁷ where the route supports it: the CLI's
    #: default) or ``None`` (off).
    early_absorption: float | Literal["auto"] | None = None
    #: Trajectories that overflow (NaN or inf): "raise" (stop with an error) or "exclude"
    #: (drop them from the probabilities, counted in n_nonfinite).
    on_nonfinite: str = defaults.ON_NONFINITE
    x64: bool = False
    #: Trajectories whose tokens merged numerically: "auto" (bound, rerun in float64 where
    #: the bound is weak, count), or "raise", "exclude", "count" (see
    #: :func:`attndyn.estimate_probabilities`).
    on_merged: str = defaults.ON_MERGED

    def __post_init__(self):
        # Checked here, where a study's options enter, by the estimator's own rules (in
        # this class's names); the estimator trusts them (estimate_checked).
        check_options(
            n_trajectories=self.n_trajectories,
            tol=self.tol,
            radius=1.0,
            on_nonfinite=self.on_nonfinite,
            chunk_size=self.chunk_size,
            route=self.route,
            on_merged=self.on_merged,
            early_absorption=self.absorption(),
            names=MONTE_CARLO_NAMES,
        )
        check_seed("seed", self.seed)
        check_bool("x64", self.x64)

    def absorption(self) -> float | str | bool:
        """``early_absorption`` as the estimator takes it (``None`` is off: ``False``)."""
        return False if self.early_absorption is None else self.early_absorption

    def estimate(
        self,
        model_fn: Callable[..., AbstractModel],
        points: Sequence[Mapping[str, Any]],
        *,
        checkpoint: Path | None = None,
        progress: bool = True,
        metadata: Mapping[str, Any] | None = None,
        route: str | None = None,
    ) -> xr.Dataset:
        if route is not None:  # an override enters here
            check_choice("route", route, ROUTES)
        return estimate_checked(
            model_fn,
            points,
            key=jax.random.key(self.seed),
            n_trajectories=self.n_trajectories,
            tol=self.tol,
            radius=1.0,
            chunk_size=self.chunk_size,
            checkpoint=checkpoint,
            progress=progress,
            # Named apart from the papers ("seed 003" is a paper, not a random seed).
            metadata={"random_seed": self.seed, **(metadata or {})},
            route=route or self.route,
            early_absorption=self.absorption(),
            on_nonfinite=self.on_nonfinite,
            x64=self.x64,
            on_merged=self.on_merged,
        )


@renamed(tokens="n_tokens", kind="diagram")
def phase_points(
    diagram: str,
    *,
    betas: Sequence[float | int],
    dims: Sequence[int],
    n_tokens: Sequence[int],
    eps: Sequence[float | int] = (),
) -> list[dict[str, Any]]:
    """The grid of a phase diagram: (d, N, β), or (d, N, ε, β) for ``beta-eps``.

    β and ε enter as Python floats whatever their type here (``betas=[1, 2]`` is β = 1.0,
    2.0): a point's random numbers depend on its values as written, and the CLI writes
    floats, so the API and the CLI draw the same trajectories for the same point. A value
    given twice is refused (:func:`attndyn._estimate.plan.check_distinct`)."""
    check_choice("diagram", diagram, DIAGRAMS)
    for name, values in (("betas", betas), ("dims", dims), ("n_tokens", n_tokens), ("eps", eps)):
        check_sequence(name, values)
    check_bound("beta", np.asarray(betas, dtype=np.float64), lower=0.0)
    for d in dims:
        check_int("dim", d, lower=2, upper=MAX_DIM)
    for n in n_tokens:
        check_int("n_tokens", n, lower=1, upper=MAX_TOKENS)
    axes: dict[str, list] = {"dim": [int(d) for d in dims], "n_tokens": [int(n) for n in n_tokens]}
    if diagram == "beta-eps":
        check_bound("eps", np.asarray(eps, dtype=np.float64), lower=0.0)
        axes["eps"] = [float(e) for e in eps]
    axes["beta"] = [float(b) for b in betas]
    points = grid(**axes)
    check_distinct(points)
    # Every check of the estimator's check_points made: it trusts these (one check of d).
    return CheckedPoints(points)


@renamed(kind="diagram")
def phase_diagram_study(
    diagram: str,
    spec: ModelSpec,
    mc: MonteCarlo,
    points: Sequence[Mapping[str, Any]],
    *,
    checkpoint: Path | None = None,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Estimate a phase diagram; add the exact t = ∞ two-token curve of Post-LN (its N = 2
    points; computed before the simulation, NaN with a note where β >
    :data:`attndyn.theory.EXACT_BETA_MAX`; none for another ``spec.scheme``, which has no
    such theory), for ``beta-n`` the three-token reading of
    :func:`three_token_curve`, and the SDE solver's measured drift off the sphere
    (``engine="sde"``). ``diagram`` (``kind`` in 0.4, deprecated) requires
    ``spec.noise`` (beta-d and beta-n: ``"matrix"``, beta-eps: ``"scalar"``, as the CLI
    pairs them; another is refused) and fixes the keys of every point
    (:func:`phase_points`)."""
    spec = spec.for_study("phase-diagram")
    points = check_study(diagram, spec, points)
    # Every point's model, built once (and so validated) before anything runs; the
    # estimator and the drift measurement take these.
    model_fn = BuiltModels(spec.model_fn(), points, x64=mc.x64)
    eq7 = spec.model.has_layer_step
    if eq7:
        warn_hybrid_step(points, spec)
    # Exact references first: a failure there must not waste the simulation. They are
    # Post-LN's (seed 003's theory): another scheme's dataset carries none.
    exact = None
    if spec.scheme == "post-ln" and diagram == "beta-eps":
        exact = exact_hybrid_curve(points, spec.attention, norm=spec.norm)
    elif spec.scheme == "post-ln":
        exact = exact_curve(points, norm=spec.norm)
    three = three_token_curve(points, spec, tol=mc.tol) if diagram == "beta-n" else None
    ds = mc.estimate(
        model_fn,
        points,
        checkpoint=checkpoint,
        progress=progress,
        metadata={**study_fields("phase-diagram", diagram), **spec.metadata(), **(metadata or {})},
    )
    if exact is not None:
        add_exact_curve(ds, exact, hybrid=diagram == "beta-eps", norm=spec.norm)
    if three is not None:
        add_three_token_curve(ds, three, horizon=spec.study_horizon("phase-diagram"))
    if spec.model.engine.leaves_sphere:
        add_sphere_drift(ds, drift_models(model_fn, mc), points, seed=mc.seed)
    if eq7:
        add_layer_step(ds, points, spec)
    describe(ds, title=TITLES[diagram])
    return index_points(ds)


#: The ``title`` of each diagram's dataset.
TITLES = {
    "beta-d": "attndyn phase diagram: clustering-class probabilities over (beta, d) of two "
    "tokens with full value noise (seed 003 Fig. 3)",
    "beta-eps": "attndyn phase diagram: clustering-class probabilities over (beta, epsilon) "
    "of the hybrid model (seed 003 Fig. 4)",
    "beta-n": "attndyn phase diagram: clustering-class probabilities over (beta, N) with "
    "full value noise (seed 003 Fig. 6)",
}


def layer_steps(points: Sequence[Mapping[str, Any]], spec: ModelSpec) -> np.ndarray:
    """003 eq. 7's layer step per point (:func:`attndyn.theory.hybrid_layer_step`) for the
    hybrid points (those with ε > 0; NaN for the others)."""
    depth = _layers_per_unit(spec)
    return np.asarray(
        [
            hybrid_layer_step(p["beta"], p["eps"], depth, spec.attention)
            if p.get("model", "hybrid") == "hybrid" and (p.get("eps") or 0) > 0
            else float("nan")
            for p in points
        ]
    )


def _layers_per_unit(spec: ModelSpec) -> int | float:
    """L of a spec whose engine has layers (eq. 7's layer step is theirs)."""
    layers = spec.model.engine.layers_per_unit()
    if layers is None:
        raise ParameterError("the layer step of seed 003 eq. 7 needs the discrete engine.")
    return layers


def add_layer_step(ds: xr.Dataset, points: Sequence[Mapping[str, Any]], spec: ModelSpec) -> None:
    """``layer_step`` and ``far_from_limit`` (1 where the step exceeds
    :data:`attndyn.theory.STEP_WARNING`: the cells the figure marks and the CLI warns of)."""
    steps = layer_steps(points, spec)
    ds["layer_step"] = ("point", steps)
    with np.errstate(invalid="ignore"):
        far = np.where(np.isfinite(steps), steps > STEP_WARNING, False)
    ds["far_from_limit"] = ("point", far.astype(np.int8))
    ds["far_from_limit"].attrs.update(
        flag_values=np.array([0, 1], np.int8),
        flag_meanings="near_the_sde_limit far_from_the_sde_limit",
        threshold=STEP_WARNING,
    )


def check_study(
    diagram: str, spec: ModelSpec, points: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The diagram, the spec's noise and the points' keys must fit together, before anything
    runs: another noise would run one model and attach the exact curve of another, and a
    missing key would fail deep in tracing. The points, in today's names (0.4's
    ``tokens`` read as ``n_tokens``, with a deprecation warning)."""
    check_choice("diagram", diagram, DIAGRAMS)
    noise = NOISE_OF_DIAGRAM[diagram]
    if spec.noise != noise:
        noises = ", ".join(f"{k}: {n}" for k, n in NOISE_OF_DIAGRAM.items())
        raise ParameterError(
            f"diagram={diagram!r} needs ModelSpec(noise={noise!r}); got noise={spec.noise!r} "
            f"(the diagrams' noises: {noises})."
        )
    if not isinstance(points, Sequence) or not all(isinstance(p, Mapping) for p in points):
        raise ParameterError("points must be a list of dicts, e.g. from phase_points.")
    checked = isinstance(points, CheckedPoints)
    points = [
        translate(dict(p), {"tokens": "n_tokens"}, "a point's key", stacklevel=4) for p in points
    ]
    keys = POINT_KEYS[diagram]
    for p in points:
        if set(p) != set(keys):
            raise ParameterError(
                f"every point of diagram={diagram!r} gives exactly the keys {', '.join(keys)} "
                f"(see phase_points); got {p}."
            )
    # Points phase_points checked stay trusted; others the estimator checks.
    return CheckedPoints(points) if checked else points


def warn_hybrid_step(points: Sequence[Mapping[str, Any]], spec: ModelSpec) -> None:
    """Warn once when 003 eq. 7's layer step exceeds 0.1 somewhere on the grid (there the
    discrete model at this depth is far from the SDE limit, and its answer depends on the
    law of v_n), naming the depth that would bring every point under it."""
    depth = _layers_per_unit(spec)
    steps = [
        (hybrid_layer_step(p["beta"], p["eps"], depth, spec.attention), p)
        for p in points
        if p.get("eps")
    ]
    big = [(step, p) for step, p in steps if step > STEP_WARNING]
    if not big:
        return
    step, worst = max(big, key=lambda item: item[0])
    needed = max(depth_for_step(p["beta"], p["eps"], spec.attention) for _, p in big)
    formula = "ε·e^β/(2√L)" if spec.attention == "unnormalized" else "ε/(2√L)"
    warnings.warn(
        f"the hybrid layer step {formula} exceeds {STEP_WARNING} at {len(big)} of "
        f"{len(points)} points (largest {step:.3g} at β = {worst['beta']}, ε = {worst['eps']}, "
        f"L = {depth:g}): there the discrete model is far from the SDE limit and depends "
        f"on the law of v_n; depth ≥ {needed} would bring every point under {STEP_WARNING}.",
        stacklevel=3,
    )


def exact_hybrid_curve(
    points: Sequence[Mapping[str, Any]], attention: str, *, norm: str = "rms"
) -> np.ndarray:
    """The t = ∞ two-token probability of the hybrid SDE per point (scale function; 0 at
    ε = 0, NaN for N ≠ 2); with ``norm="layernorm"`` the RMS one of d − 1 dimensions (the
    hybrid drift has no d: only the start's law, uniform on the hyperplane's sphere,
    changes)."""
    return np.asarray(
        [
            (
                p_antipodal_hybrid_uniform(
                    p["beta"], p["eps"], effective_dim(p["dim"], norm), attention
                )
                if p["eps"] > 0
                else 0.0
            )
            if p["n_tokens"] == 2
            else float("nan")
            for p in points
        ]
    )


def exact_curve(points: Sequence[Mapping[str, Any]], *, norm: str = "rms") -> np.ndarray:
    """The t = ∞ two-token probability per point: NaN for N ≠ 2, and for β above
    :data:`attndyn.theory.EXACT_BETA_MAX` (where it is within 10⁻³ of its limit 1/2); with
    ``norm="layernorm"`` the RMS one of d − 1 dimensions."""
    return np.asarray(
        [
            p_antipodal_uniform(p["beta"], p["dim"], norm)
            if p["n_tokens"] == 2 and p["beta"] <= EXACT_BETA_MAX
            else float("nan")
            for p in points
        ]
    )


def add_exact_curve(
    ds: xr.Dataset, exact: np.ndarray, *, hybrid: bool = False, norm: str = "rms"
) -> None:
    """``p_antipodal_exact`` (from :func:`exact_curve` or :func:`exact_hybrid_curve`)."""
    ds["p_antipodal_exact"] = ("point", exact)
    ds["p_antipodal_exact"].attrs["description"] = (
        "exact t = ∞ probability of the hybrid overlap diffusion for two uniform tokens "
        "(closed-form scale function); NaN for N ≠ 2"
        if hybrid
        else "exact t = ∞ probability for two uniform tokens (scale-function quadrature"
        + (", RMS model in d − 1 dimensions" if norm == "layernorm" else "")
        + f"); NaN for N ≠ 2 and for β > {EXACT_BETA_MAX:g}, beyond the quadrature's range "
        "(it tends to 1/2 as β → ∞)"
    )


def three_token_curve(
    points: Sequence[Mapping[str, Any]], spec: ModelSpec, *, tol: float
) -> np.ndarray:
    """Per point, Fig. 6's three-token reading (3/2)·P₂·F·e^{−T/τ} at T = the horizon
    (:func:`attndyn.theory.p_antipodal_pair_three_tokens`): the chance that a 2 : 1
    antipodal split formed and is still seen with an antipodal pair. A reading compared
    with the paper-scale data (within 0.017), not a proof. NaN where it was not derived:
    N ≠ 3, unnormalised attention, LayerNorm tokens, non-Gaussian values, d < 3, a scheme
    other than Post-LN."""
    gaussian = spec.model.engine.gaussian(spec.model.noise)
    applies = spec.attention == "softmax" and spec.norm == "rms" and gaussian
    applies = applies and spec.scheme == "post-ln"
    return np.asarray(
        [
            p_antipodal_pair_three_tokens(
                p["beta"], p["dim"], spec.study_horizon("phase-diagram"), tol=tol, sigma=spec.sigma
            )
            if applies and p["n_tokens"] == 3 and p["dim"] >= 3 and p["beta"] <= EXACT_BETA_MAX
            else float("nan")
            for p in points
        ]
    )


def add_three_token_curve(ds: xr.Dataset, curve: np.ndarray, *, horizon: float) -> None:
    """``p_antipodal_pair_three_tokens`` (from :func:`three_token_curve`)."""
    ds["p_antipodal_pair_three_tokens"] = ("point", curve)
    ds["p_antipodal_pair_three_tokens"].attrs["description"] = (
        f"three tokens: (3/2)·P2·F·exp(-T/tau) at T = {horizon:g}, the chance that a 2:1 "
        "antipodal split formed and is still seen with an antipodal pair (a reading, "
        "within 0.017 of seed 003 Fig. 6 at the paper's scale; not a proof); NaN for "
        "N != 3, unnormalised attention, LayerNorm, non-Gaussian values or d < 3"
    )


def sphere_drift_of(model_fn, points, *, seed: int, n: int = 32) -> list[float]:
    """Max | |Y_i| − 1 | over ``n`` trajectories per point of an SDE model (saved states),
    in the models' own precision: float64 for the models of an x64 study (measured in
    float32, an x64 run at β = 50 with unnormalised attention reported NaN, issue 42).

    One compiled function serves every point of a shape (the model is an argument, its
    swept parameters array leaves): a closure per point would compile once per point."""
    keys = jax.random.split(jax.random.key(seed + 7919), n)
    out = []
    for p in points:
        model = model_fn(**p)
        wide = _in_float64(model)
        with jax.enable_x64(wide):
            dtype = np.dtype(np.float64 if wide else np.float32)
            drift = _max_drift(model, keys, int(p["n_tokens"]), int(p["dim"]), dtype)
            out.append(float(np.nanmax(np.asarray(drift))))
    return out


def _in_float64(model: AbstractModel) -> bool:
    """Whether ``model``'s floating-point leaves are float64 (built for an x64 study)."""
    leaves = [leaf for leaf in jax.tree.leaves(model) if eqx.is_array(leaf)]
    return any(leaf.dtype == np.float64 for leaf in leaves)


@eqx.filter_jit
def _max_drift(model, keys, n_tokens: int, dim: int, dtype):
    def one(key):
        k1, k2 = jax.random.split(key)
        x0 = uniform_sphere(key=k1, n_tokens=n_tokens, dim=dim, dtype=dtype)
        return model.solve(x0, key=k2).sphere_drift

    return jax.vmap(one)(keys)


def drift_models(built: BuiltModels, mc: MonteCarlo) -> Callable[..., AbstractModel]:
    """The models whose drift off the sphere is measured: those built for the estimator
    (float64 with ``x64``: the drift is measured in the run's precision)."""
    del mc
    return built


def add_sphere_drift(ds: xr.Dataset, model_fn, points, *, seed: int) -> None:
    ds["sphere_drift"] = ("point", np.asarray(sphere_drift_of(model_fn, points, seed=seed)))
    ds["sphere_drift"].attrs["description"] = (
        "max | |Y_i| − 1 | over saved states of 32 trajectories (solver error left)"
    )
