"""One description of the model a study runs: an engine and a noise as small objects.

A study's points supply β, d, N (and, where the noise level is swept, ε or σ); everything
else about the model is a :class:`StudyModel`:

- the **engine**, :class:`Discrete` (the depth-L layer maps, or a real step η) or
  :class:`SDE` (their L → ∞ limit, a solver and a step dt), each checking its own fields
  where it is made, building the model of a point and reporting its own provenance;
- the **noise** added to the attention flow, :class:`NoNoise`, :class:`ScalarNoise`
  (seed 003's ε, eq. 7 / eq. 8) or :class:`MatrixNoise` (σ, eq. 4 / eq. 6), each building
  its value operator (discrete engine) or its SDE, and naming its equation and its law;
- the attention, the normalization scheme (with Mix-LN's τ and nGPT's α) and the token
  norm, as names, as the models take them.

Where the engine or the noise decides something, a method of that object decides it: no
study compares engine or noise names. A new engine (a mean-field one, say) is a class
with the methods of :class:`AbstractEngine`, registered in :data:`ENGINE_CLASSES`; a new
form of value noise a class with those of :class:`AbstractNoise`, in
:data:`NOISE_CLASSES`. A new law of the random values (of v_n, or of M_n's entries) is a
distribution of :mod:`attndyn._core.values`, which every noise here takes as ``law``.

:class:`attndyn.studies.ModelSpec` (phase diagrams, evolution) is the flat constructor of
these objects, by name.
"""

import abc
import copy
import dataclasses
import warnings
from typing import Any, ClassVar

from .._core import defaults
from .._core.attention import ATTENTION_KINDS, Attention
from .._core.errors import (
    INT32_MAX,
    ParameterError,
    check_bound,
    check_choice,
    check_int,
)
from .._core.names import (
    DISTRIBUTIONS,
    NOISE_NAMES,
    NORM_NAMES,
    SCHEME_NAMES,
    SDE_SOLVER_NAMES,
)
from .._core.renamed import REMOVED_IN, RENAMED_NOISES
from .._core.saveat import SaveAt
from .._core.schemes import AbstractScheme, PostLN, scheme_from_name
from .._core.values import AbstractValues, DeterministicValues, MatrixValues, ScalarValues
from .._models.base import AbstractModel
from .._models.discrete import DiscreteTransformer
from .._models.integrators import SDEIntegrator, sde_solver
from .._models.sde import HybridSDE, TransformerSDE
from ._names import ENGINES

# --- noise -----------------------------------------------------------------------------


class AbstractNoise(abc.ABC):
    """The value noise added to the attention flow V = I/L (its level, ε or σ, its own
    field or, where that is ``None``, each point's: :meth:`point_level`)."""

    name: ClassVar[str]
    #: The equations of seed 003 this noise runs with Post-LN, per engine class name.
    discrete_equation: ClassVar[str]
    sde_equation: ClassVar[str]
    #: The value noise, as another scheme's equation names it.
    words: ClassVar[str]
    #: Whether 003 eq. 7's layer step ε/(2√L) (the discrete model's distance to its SDE
    #: limit) applies: scalar noise only.
    has_layer_step: ClassVar[bool] = False

    @abc.abstractmethod
    def values(self, *, eps: float | None, sigma: float | None) -> AbstractValues:
        """The value operator of a discrete point (its level from the point if needed)."""

    @abc.abstractmethod
    def sde(
        self, attention: Attention, saveat: SaveAt, integrator: SDEIntegrator, **level
    ) -> AbstractModel:
        """The depth limit of the layer maps with this noise (Post-LN, RMS tokens)."""

    @classmethod
    @abc.abstractmethod
    def of_fields(cls, *, sigma: float, law: str | None) -> "AbstractNoise":
        """This noise from :class:`ModelSpec`'s flat fields (σ, the value law)."""

    @classmethod
    @abc.abstractmethod
    def added_to_flow(cls, *, law: str | None) -> "AbstractNoise":
        """This noise added to the attention flow V = I/L, its level (ε or σ) each
        point's: the noise of the modes study (spec §7)."""

    def values_law(self) -> str | None:
        """The law of the random values of the discrete engine (``None``: no draw)."""
        return None

    def point_level(self) -> str | None:
        """The key of the level each point must give (``eps``, ``sigma``), where this
        noise's own field leaves it to the points; ``None`` where none is needed."""
        return None

    def metadata(self) -> dict[str, Any]:
        """This noise's own provenance fields (its law is recorded by the engine)."""
        return {}

    def check_engine(self, engine: "AbstractEngine") -> None:
        """Refuse an engine this noise has no model for (nothing by default)."""
        del engine


def _check_law(law: str | None) -> None:
    if law is not None:
        check_choice("values", law, DISTRIBUTIONS)


@dataclasses.dataclass(frozen=True)
class NoNoise(AbstractNoise):
    """Deterministic values, V_n = I/L: the attention flow (seed 003 Lemma 2).

    ``as_scalar=True`` (phase diagrams, evolution) runs it as the scalar noise at ε = 0,
    the compiled program of the hybrid points; ``False`` draws nothing
    (:class:`attndyn.DeterministicValues`: the modes study). The same flow either way."""

    as_scalar: bool = True

    name: ClassVar[str] = "none"
    discrete_equation: ClassVar[str] = "seed 003 eq. 7 with ε = 0 (Post-LN, deterministic values)"
    sde_equation: ClassVar[str] = "seed 003 Lemma 2 (the attention ODE, fixed steps)"
    words: ClassVar[str] = "deterministic values (V_n = I/L)"

    @classmethod
    def of_fields(cls, *, sigma, law) -> "NoNoise":
        del sigma, law
        return cls()

    @classmethod
    def added_to_flow(cls, *, law) -> "NoNoise":
        del law
        return cls(as_scalar=False)

    def values(self, *, eps=None, sigma=None) -> AbstractValues:
        del eps, sigma
        return ScalarValues(0.0) if self.as_scalar else DeterministicValues()

    def sde(self, attention, saveat, integrator, **level) -> AbstractModel:
        return HybridSDE(attention, eps=0.0, saveat=saveat, integrator=integrator)


@dataclasses.dataclass(frozen=True)
class ScalarNoise(AbstractNoise):
    """Scalar value noise, V_n = (1/L + ε v_n/√L)·I (seed 003 eq. 7; its SDE eq. 8).

    ``eps=None``: each point gives ε (its ``eps``). ``law``: the law of v_n (default
    Rademacher: eq. 7 assumes bounded v_n)."""

    eps: float | None = None
    law: str | None = None

    name: ClassVar[str] = "scalar"
    discrete_equation: ClassVar[str] = "seed 003 eq. 7 (Post-LN, scalar value noise)"
    sde_equation: ClassVar[str] = "seed 003 eq. 8 (hybrid SDE)"
    words: ClassVar[str] = "scalar value noise (V_n of seed 003 eq. 7)"
    has_layer_step: ClassVar[bool] = True

    def __post_init__(self):
        if self.eps is not None:
            check_bound("eps", self.eps, lower=0.0)
        _check_law(self.law)

    @classmethod
    def of_fields(cls, *, sigma, law) -> "ScalarNoise":
        del sigma  # ε is the points'
        return cls(law=law)

    @classmethod
    def added_to_flow(cls, *, law) -> "ScalarNoise":
        return cls(law=law)

    def point_level(self) -> str | None:
        return "eps" if self.eps is None else None

    def _eps(self, eps: float | None) -> float:
        value = self.eps if self.eps is not None else eps
        if value is None:
            raise ParameterError("scalar noise needs eps (ε ≥ 0): give it on the point.")
        return value

    def values(self, *, eps=None, sigma=None) -> AbstractValues:
        del sigma
        return ScalarValues(self._eps(eps), distribution=self.law or "rademacher")

    def sde(self, attention, saveat, integrator, **level) -> AbstractModel:
        eps = self._eps(level.get("eps"))
        return HybridSDE(attention, eps=eps, saveat=saveat, integrator=integrator)

    def values_law(self) -> str | None:
        return self.law or "rademacher"


@dataclasses.dataclass(frozen=True)
class MatrixNoise(AbstractNoise):
    """Matrix value noise, V_n = drift·I/L + σ M_n/√L (seed 003 eq. 4, drift 0; its SDE
    eq. 6). ``sigma=None``: each point gives σ (its ``sigma``; σ = 0 with drift 1 is the
    flow itself). ``law``: the law of M_n's entries (default Gaussian, as the paper's
    experiments). ``drift=1`` adds the noise to the attention flow (the modes study); that
    model has no SDE in attndyn."""

    sigma: float | None = defaults.SIGMA
    law: str | None = None
    drift: float = 0.0

    name: ClassVar[str] = "matrix"
    discrete_equation: ClassVar[str] = "seed 003 eq. 4 (Post-LN, full value noise)"
    sde_equation: ClassVar[str] = "seed 003 eq. 6 (Transformer SDE)"
    words: ClassVar[str] = "full value noise (V_n of seed 003 eq. 4)"

    def __post_init__(self):
        if self.sigma is not None:
            check_bound("sigma", self.sigma, lower=0.0, lower_open=True)
        _check_law(self.law)
        check_bound("drift", self.drift)

    @classmethod
    def of_fields(cls, *, sigma, law) -> "MatrixNoise":
        return cls(sigma=sigma, law=law)

    @classmethod
    def added_to_flow(cls, *, law) -> "MatrixNoise":
        return cls(sigma=None, law=law, drift=1.0)

    def point_level(self) -> str | None:
        return "sigma" if self.sigma is None else None

    def _sigma(self, sigma: float | None) -> float:
        value = self.sigma if self.sigma is not None else sigma
        if value is None:
            raise ParameterError("matrix noise needs sigma (σ ≥ 0): give it on the point.")
        return value

    def values(self, *, eps=None, sigma=None) -> AbstractValues:
        del eps
        scale = self._sigma(sigma)
        if scale == 0 and self.drift == 1.0:
            return DeterministicValues()  # σ = 0: the flow itself (MatrixValues needs σ > 0)
        return MatrixValues(scale, distribution=self.law or "gaussian", drift=self.drift)

    def sde(self, attention, saveat, integrator, **level) -> AbstractModel:
        sigma = self._sigma(level.get("sigma"))
        return TransformerSDE(attention, sigma=sigma, saveat=saveat, integrator=integrator)

    def values_law(self) -> str | None:
        return self.law or "gaussian"

    def metadata(self) -> dict[str, Any]:
        return {} if self.sigma is None else {"sigma": self.sigma}

    def check_engine(self, engine: "AbstractEngine") -> None:
        if self.drift != 0 and not engine.has_layers:
            raise ParameterError(
                "noise='matrix' has no depth limit with the flow's drift in attndyn (seed "
                "003's matrix SDE, eq. 6, has no attention drift); use engine='discrete', "
                "or noise 'none' or 'scalar' (the hybrid SDE, eq. 8)."
            )


#: The noise classes by name (``noise=`` of the studies, ``--noise`` of the CLI).
NOISE_CLASSES: dict[str, type[AbstractNoise]] = {
    cls.name: cls for cls in (NoNoise, ScalarNoise, MatrixNoise)
}


def noise_name(value: str, *, where: str = "noise", stacklevel: int = 3) -> str:
    """``value`` in today's names: 0.4's ``full`` and ``hybrid`` read as ``matrix`` and
    ``scalar`` with a :class:`DeprecationWarning`; then checked against
    :data:`attndyn._core.names.NOISE_NAMES`."""
    if isinstance(value, str) and value in RENAMED_NOISES:
        new = RENAMED_NOISES[value]
        warnings.warn(
            f"{where}={value!r} is deprecated, use {where}={new!r} (the old name goes in "
            f"{REMOVED_IN}).",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        value = new
    check_choice(where, value, NOISE_NAMES)
    return value


# --- engine ----------------------------------------------------------------------------


class AbstractEngine(abc.ABC):
    """How a point's model advances in time: by layers or by an SDE solver."""

    name: ClassVar[str]
    #: Whether the model is a stack of layers (a layer map, a value law, a layer step).
    has_layers: ClassVar[bool]
    #: Whether the solver's error moves the tokens off the sphere between its projections
    #: (the studies measure it: ``sphere_drift``).
    leaves_sphere: ClassVar[bool] = False

    @abc.abstractmethod
    def model(
        self,
        attention: Attention,
        noise: AbstractNoise,
        scheme: AbstractScheme | None,
        saveat: SaveAt,
        **level,
    ) -> AbstractModel:
        """The model of one point (``scheme``: the layer map, discrete engines only)."""

    @abc.abstractmethod
    def metadata(self) -> dict[str, Any]:
        """This engine's own provenance fields."""

    @abc.abstractmethod
    def equation(self, noise: AbstractNoise) -> str:
        """Seed 003's equation of Post-LN with ``noise`` on this engine."""

    def layers_per_unit(self) -> int | float | None:
        """Layers per unit time (``None``: no layers)."""
        return None

    def real_step(self) -> float | None:
        """A real layer step η given instead of the depth (``None``: none)."""
        return None

    def check_model(self, *, scheme: str, norm: str) -> None:
        """Refuse a scheme or norm this engine has no model for (nothing by default)."""
        del scheme, norm

    def check_horizon(self, horizon: float) -> None:
        """Refuse a horizon this engine cannot step to (nothing by default)."""
        del horizon

    def value_law(self, noise: AbstractNoise) -> str | None:
        """The law of the random values, as provenance records it (``None``: none)."""
        return noise.values_law()

    def gaussian(self, noise: AbstractNoise) -> bool:
        """Whether the noise is Gaussian (a Brownian motion is)."""
        return noise.values_law() == "gaussian"


@dataclasses.dataclass(frozen=True)
class Discrete(AbstractEngine):
    """The depth-L layer maps (t = n/L), or a real layer step η (``step``, t = nη)."""

    depth: int = defaults.DEPTH
    step: float | None = None

    name: ClassVar[str] = "discrete"
    has_layers: ClassVar[bool] = True

    def __post_init__(self):
        check_int("depth", self.depth, lower=1, upper=INT32_MAX)
        if self.step is not None:
            check_bound("step", self.step, lower=0.0, lower_open=True)

    def layers_per_unit(self) -> int | float:
        """L, or 1/η with a real step."""
        return self.depth if self.step is None else 1 / self.step

    def real_step(self) -> float | None:
        return self.step

    def model(self, attention, noise, scheme, saveat, **level) -> AbstractModel:
        if scheme is None:
            raise ParameterError("the discrete engine needs a layer map (a scheme).")
        values = noise.values(eps=level.get("eps"), sigma=level.get("sigma"))
        if self.step is not None:
            return DiscreteTransformer(attention, values, scheme, saveat=saveat, step=self.step)
        return DiscreteTransformer(attention, values, scheme, depth=self.depth, saveat=saveat)

    def metadata(self) -> dict[str, Any]:
        return {"depth": self.depth} if self.step is None else {"step": self.step}

    def equation(self, noise: AbstractNoise) -> str:
        return noise.discrete_equation


@dataclasses.dataclass(frozen=True)
class SDE(AbstractEngine):
    """The L → ∞ limit of Post-LN (RMS tokens): seed 003's SDEs, solved with fixed steps
    ``dt`` by ``solver`` (one of :data:`attndyn._core.names.SDE_SOLVER_NAMES`) and
    projected back onto the sphere after each step."""

    solver: str = defaults.SOLVER
    dt: float = defaults.DT

    name: ClassVar[str] = "sde"
    has_layers: ClassVar[bool] = False
    leaves_sphere: ClassVar[bool] = True

    def __post_init__(self):
        check_choice("solver", self.solver, SDE_SOLVER_NAMES)
        check_bound("dt", self.dt, lower=0.0, lower_open=True)

    def model(self, attention, noise, scheme, saveat, **level) -> AbstractModel:
        del scheme  # Post-LN's limit (check_model)
        integrator = SDEIntegrator(sde_solver(self.solver), self.dt)
        return noise.sde(attention, saveat, integrator, **level)

    def metadata(self) -> dict[str, Any]:
        return {"solver": self.solver, "dt": self.dt, "sphere_scheme": "projection after each step"}

    def equation(self, noise: AbstractNoise) -> str:
        return noise.sde_equation

    def check_model(self, *, scheme: str, norm: str) -> None:
        if scheme != "post-ln":
            raise ParameterError(
                f"scheme={scheme!r} has no sde engine: the SDEs (seed 003 eq. 6 / eq. 8) "
                "are the depth limit of Post-LN; use engine='discrete' or scheme='post-ln'."
            )
        if norm != "rms":
            raise ParameterError(
                f"norm={norm!r} is defined for the discrete engine; its SDE limit is "
                "the RMS SDE in d − 1 dimensions (use the sde engine with dim − 1)."
            )

    def check_horizon(self, horizon: float) -> None:
        if self.dt > horizon:
            raise ParameterError(
                f"dt={self.dt} is larger than the horizon={horizon}; the step must "
                "lie in (0, horizon]."
            )

    def value_law(self, noise: AbstractNoise) -> str | None:
        return None  # the SDEs' noise is a Brownian motion, whatever the values' law

    def gaussian(self, noise: AbstractNoise) -> bool:
        return True


#: The engine classes by name (``engine=`` of the studies, ``--engine`` of the CLI).
ENGINE_CLASSES: dict[str, type[AbstractEngine]] = {cls.name: cls for cls in (Discrete, SDE)}


def engine_of(
    name: str,
    *,
    depth: int = defaults.DEPTH,
    step: float | None = None,
    solver: str = defaults.SOLVER,
    dt: float = defaults.DT,
) -> AbstractEngine:
    """The engine called ``name`` from the flat fields of :class:`ModelSpec` (the other
    engine's fields refused unless left at their defaults: they would be ignored)."""
    check_choice("engine", name, ENGINES)
    if ENGINE_CLASSES[name] is Discrete:
        for field, value, default in (("solver", solver, defaults.SOLVER), ("dt", dt, defaults.DT)):
            if value != default:
                raise ParameterError(
                    f"{field}={value!r} applies to engine='sde' only; the discrete engine "
                    "steps by 1/depth."
                )
        return Discrete(depth=depth, step=step)
    if step is not None:
        check_bound("step", step, lower=0.0, lower_open=True)
        raise ParameterError(
            "step is the layer step of the discrete engine; the sde engine takes dt."
        )
    check_int("depth", depth, lower=1, upper=INT32_MAX)  # unused, but never a bad value
    return ENGINE_CLASSES[name](solver=solver, dt=dt)  # type: ignore[call-arg]


# --- the model of a study --------------------------------------------------------------


def layer_map(scheme: str, *, norm: str, tau: float, alpha: float, step: float | None):
    """The scheme object of a discrete point: Post-LN as 0.4 built it (the same object, so
    the same compiled program and checkpoint signature), another scheme by name."""
    if scheme == "post-ln":
        return PostLN() if norm == "rms" and step is None else PostLN(norm=norm)
    return scheme_from_name(scheme, tau=tau, alpha=alpha, norm=norm)


@dataclasses.dataclass(frozen=True)
class StudyModel:
    """The model every point of a study runs, but for the point's β, d, N (and noise
    level): checked once, here, where it is made.

    ``horizon=None`` leaves T to the study (:meth:`with_horizon`); ``saveat``: the save
    times in [0, T] (default T only). ``tau`` and ``alpha``: Mix-LN's switch and nGPT's
    step, each only with its scheme. ``implementation``: how attention is computed."""

    engine: AbstractEngine = dataclasses.field(default_factory=Discrete)
    noise: AbstractNoise = dataclasses.field(default_factory=MatrixNoise)
    attention: str = defaults.ATTENTION
    scheme: str = defaults.SCHEME
    norm: str = defaults.NORM
    horizon: float | None = None
    saveat: tuple[float | int, ...] | None = None
    tau: float = defaults.TAU
    alpha: float = defaults.ALPHA
    implementation: str = defaults.IMPLEMENTATION
    # Built once from the fields above (every point shares them).
    _layer_map: AbstractScheme | None = dataclasses.field(
        init=False, repr=False, compare=False, default=None
    )
    _saveat: SaveAt | None = dataclasses.field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self):
        if not isinstance(self.engine, AbstractEngine):
            raise ParameterError(f"engine={self.engine!r} must be Discrete(...) or SDE(...).")
        if not isinstance(self.noise, AbstractNoise):
            raise ParameterError(
                f"noise={self.noise!r} must be NoNoise(), ScalarNoise(...) or MatrixNoise(...)."
            )
        check_choice("norm", self.norm, NORM_NAMES)
        check_choice("attention", self.attention, ATTENTION_KINDS)
        self._check_scheme()
        self.engine.check_model(scheme=self.scheme, norm=self.norm)
        self.noise.check_engine(self.engine)
        if self.engine.has_layers:
            step = getattr(self.engine, "step", None)
            layers = layer_map(
                self.scheme, norm=self.norm, tau=self.tau, alpha=self.alpha, step=step
            )
            object.__setattr__(self, "_layer_map", layers)
        self._set_horizon(self.horizon)

    def _check_scheme(self) -> None:
        """The scheme, and its own number only where it has one (τ for Mix-LN, α for nGPT:
        another scheme would ignore it)."""
        check_choice("scheme", self.scheme, SCHEME_NAMES)
        for name, owner, default, lower_open in (
            ("tau", "mix-ln", defaults.TAU, False),
            ("alpha", "ngpt", defaults.ALPHA, True),
        ):
            value = getattr(self, name)
            check_bound(name, value, lower=0.0, lower_open=lower_open)
            if self.scheme != owner and value != default:
                raise ParameterError(
                    f"{name}={value!r} applies to scheme={owner!r} only; scheme="
                    f"{self.scheme!r} has no {name} (leave it at {default:g})."
                )

    def _set_horizon(self, horizon: float | None) -> None:
        """T's own checks, and the :class:`SaveAt` every point shares."""
        when = None
        if horizon is not None:
            check_bound("horizon", horizon, lower=0.0, lower_open=True)
            self.engine.check_horizon(horizon)
            when = SaveAt(horizon, self.saveat)
        object.__setattr__(self, "horizon", horizon)
        object.__setattr__(self, "_saveat", when)

    def with_horizon(self, horizon: float, saveat: tuple[float | int, ...] | None = None):
        """This model with T = ``horizon`` (and ``saveat``, if given): only what depends
        on T is checked again."""
        new = copy.copy(self)
        if saveat is not None:
            object.__setattr__(new, "saveat", saveat)
        new._set_horizon(horizon)
        return new

    def with_noise(self, noise: AbstractNoise) -> "StudyModel":
        """This model with another noise (evolution's models): only the pair is checked."""
        noise.check_engine(self.engine)
        new = copy.copy(self)
        object.__setattr__(new, "noise", noise)
        return new

    def model(
        self,
        *,
        beta: float,
        dim: int,
        n_tokens: int,
        eps: float | None = None,
        sigma: float | None = None,
    ) -> AbstractModel:
        """The model of one point (``eps`` or ``sigma``: the point's noise level, where the
        noise takes it from the point)."""
        del n_tokens
        if self._saveat is None:
            raise ParameterError("horizon is not set: give horizon=T (or run it in a study).")
        if self.norm != "rms" and not (isinstance(dim, int) and dim >= 3):
            raise ParameterError(
                f"dim={dim!r} must be an integer >= 3 with norm={self.norm!r} (CLI: --norm "
                f"{self.norm}): it puts the tokens on the unit sphere of the mean-zero "
                "hyperplane, of dimension d − 2; give a larger dim or norm='rms'."
            )
        att = Attention(beta, kind=self.attention, implementation=self.implementation)  # type: ignore[arg-type]
        return self.engine.model(
            att, self.noise, self._layer_map, self._saveat, eps=eps, sigma=sigma
        )

    @property
    def has_layer_step(self) -> bool:
        """Whether seed 003 eq. 7's layer step applies: scalar noise on Post-LN's layers."""
        return self.noise.has_layer_step and self.engine.has_layers and self.scheme == "post-ln"

    def equation(self) -> str:
        """The equation the points run: seed 003's for Post-LN; for another scheme
        (discrete engine only), seed 004's layer maps with seed 003's value operator."""
        if self.scheme == "post-ln":
            return self.engine.equation(self.noise)
        return f"seed 004 Table 1 ({self.scheme} layer maps) with {self.noise.words}"

    def metadata(self) -> dict[str, Any]:
        """Provenance of the model choice, read from the fields."""
        record: dict[str, Any] = {
            "model_equation": self.equation(),
            "engine": self.engine.name,
            # The scheme as a field (figures read it: the exact curves are Post-LN's).
            "scheme": self.scheme,
            "attention": self.attention,
            "values": self.engine.value_law(self.noise),
            "horizon": self.horizon,
            "norm": self.norm,
        }
        if self.scheme == "mix-ln":
            record["tau"] = self.tau
        if self.scheme == "ngpt":
            record["alpha"] = self.alpha
        return {**record, **self.noise.metadata(), **self.engine.metadata()}
