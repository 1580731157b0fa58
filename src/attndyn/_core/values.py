"""Random value operators ``V_n = a·I/L + Ξ_n/√L`` (spec §2), one per layer.

``V_n`` is shared by all tokens of a trajectory and drawn afresh for every layer and
every trajectory: the caller passes one key per (trajectory, layer).
"""

import abc
import math
from typing import ClassVar, Literal, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from . import random
from .attention import float_leaf
from .errors import ParameterError, check_choice, check_swept
from .linalg import lq, matmul
from .names import DISTRIBUTIONS as DISTRIBUTIONS

Distribution = Literal["gaussian", "uniform", "rademacher", "truncnormal"]

# Truncated normal: a standard normal cut at ±TRUNCATION, rescaled to unit variance.
TRUNCATION = 2.0
_PHI = math.exp(-0.5 * TRUNCATION**2) / math.sqrt(2 * math.pi)
_MASS = math.erf(TRUNCATION / math.sqrt(2))
_TRUNCNORMAL_STD = math.sqrt(1 - 2 * TRUNCATION * _PHI / _MASS)


def sample_entries(
    key: PRNGKeyArray, shape: tuple[int, ...], distribution: str, dtype=jnp.float32
) -> Array:
    """I.i.d. entries with mean 0 and variance 1.

    - ``gaussian``: N(0, 1);
    - ``uniform``: uniform on [−√3, √3];
    - ``rademacher``: ±1 with probability ½ each;
    - ``truncnormal``: N(0, 1) conditioned on [−2, 2], divided by its standard deviation.

    ``distribution`` is a value operator's, which its ``__check_init__`` checked: it is not
    checked again at every draw (each layer map traced).
    """
    if distribution == "gaussian":
        return random.normal(key, shape, dtype)
    if distribution == "uniform":
        s = math.sqrt(3.0)
        return random.uniform(key, shape, dtype, minval=-s, maxval=s)
    if distribution == "rademacher":
        return random.rademacher(key, shape, dtype)
    if distribution == "truncnormal":
        # Drawn in float32 whatever ``dtype`` (see attndyn._core.random: x64 keeps the path).
        z = jax.random.truncated_normal(key, -TRUNCATION, TRUNCATION, shape, random.DRAW_DTYPE)
        return (z / _TRUNCNORMAL_STD).astype(dtype)
    raise ParameterError(f"distribution={distribution!r}; choose one of {DISTRIBUTIONS}.")


class AbstractValues(eqx.Module):
    """How layer n's value operator acts on the attention output ``A`` (shape ``(N, d)``).

    A layer runs in two stages: :meth:`draw_noise` draws the layer's random numbers from
    its key (they never depend on the state), then :meth:`apply_noise` applies the operator
    they define to ``A``. The layer loop draws layer n + 1's numbers while it runs layer n
    and carries them: XLA then materialises them once instead of fusing (and so repeating)
    the hash into each of their uses. A subclass may implement :meth:`apply` only (with
    the :attr:`noise` property every subclass names); its "noise" is then the layer key
    itself.
    """

    def draw_noise(self, key: PRNGKeyArray, n_tokens: int, dim: int, dtype) -> PyTree:
        """The layer's random numbers (a pytree of arrays; the key itself by default)."""
        del n_tokens, dim, dtype
        return key

    def apply_noise(
        self, attention_out: Float[Array, "N d"], noise: PyTree, *, depth: int | float
    ) -> Float[Array, "N d"]:
        """The rows ``V_n A_i`` given the layer's :meth:`draw_noise`."""
        return self.apply(attention_out, key=noise, depth=depth)

    def apply(
        self, attention_out: Float[Array, "N d"], *, key: PRNGKeyArray, depth: int | float
    ) -> Float[Array, "N d"]:
        """Return the rows ``V_n A_i`` for one layer of a depth-``depth`` stack (L = 1/η may
        be a float), drawing the layer's numbers from ``key``."""
        n_tokens, dim = attention_out.shape[-2:]
        noise = self.draw_noise(key, n_tokens, dim, attention_out.dtype)
        if noise is key and type(self).apply_noise is AbstractValues.apply_noise:
            raise NotImplementedError(
                f"{type(self).__name__} must implement apply, or draw_noise and apply_noise."
            )
        return self.apply_noise(attention_out, noise, depth=depth)

    #: Whether every V_n is a multiple of the identity, ``s_n·I``: the layer maps then never
    #: leave the span of the tokens (what the span route of the reduced models uses).
    multiple_of_identity: ClassVar[bool] = False

    def gaussian_matrix(self) -> tuple[Float[Array, ""], Float[Array, ""]] | None:
        """``(a, σ)`` where ``V_n = a·I/L + σ M_n/√L`` with M_n a Gaussian matrix (i.i.d.
        N(0, 1) entries), whose law is invariant under rotations (what the reduced frame
        route simulates); ``None`` otherwise (the default)."""
        return None

    @property
    @abc.abstractmethod
    def noise(self) -> str:
        """``"none"``, ``"matrix"`` or ``"scalar"``."""

    def limit_coefficients(self) -> tuple[float, float, float] | None:
        """(a, σ, ε) of the operator's diffusion limit, V_n = a·I/L + σΞ_n/√L (full noise)
        or (I/L)(1 + εv_n√L) (scalar noise), as numbers; ``None`` when it has none known
        (what :mod:`attndyn._models.merging` needs to bound a merged pair)."""
        return None

    def multiplier_atoms(self, depth: int | float) -> tuple[float, ...]:
        """The multipliers s with ``V_n = s·I`` taken with positive probability (float64),
        for a depth-``depth`` stack: none unless the operator is a multiple of the identity
        with a law that has atoms."""
        del depth
        return ()


class AbstractScalarValues(AbstractValues):
    """Value operators that are multiples of the identity, ``V_n = s_n·I``: the layer maps
    then never leave the span of the tokens (what the span route of the reduced models
    uses)."""

    multiple_of_identity: ClassVar[bool] = True

    @abc.abstractmethod
    def scale(self, *, key: PRNGKeyArray, depth: float, dtype) -> Float[Array, ""]:
        """The layer's multiplier s_n (one draw per layer and trajectory from ``key``)."""

    def apply_noise(self, attention_out, noise, *, depth):
        # The default noise is the layer key: ``scale`` draws from it.
        return self.scale(key=noise, depth=depth, dtype=attention_out.dtype) * attention_out


@final
class DeterministicValues(AbstractScalarValues):
    """``V_n = I/L``: the layer maps are Euler steps of the deterministic ODE (003 Lemma 2)."""

    def scale(self, *, key, depth, dtype):
        del key
        return jnp.asarray(1.0 / depth, dtype)

    def draw_noise(self, key, n_tokens, dim, dtype):
        return None

    def apply_noise(self, attention_out, noise, *, depth):
        return attention_out / depth

    def multiplier_atoms(self, depth):
        return (1.0 / depth,)

    def limit_coefficients(self):
        return 1.0, 0.0, 0.0

    @property
    def noise(self) -> str:
        return "none"


@final
class MatrixValues(AbstractValues):
    """Full value noise (003 eq. 4): ``V_n = drift·I/L + σ M_n/√L``.

    ``M_n`` is ``d×d`` with i.i.d. unit-variance entries from ``distribution``; the paper's
    model has ``drift = 0``. ``sigma`` and ``drift`` are array leaves.
    """

    sigma: Float[Array, ""] = eqx.field(converter=float_leaf("sigma"), default=1.0)
    distribution: str = eqx.field(static=True, default="gaussian")
    drift: Float[Array, ""] = eqx.field(converter=float_leaf("drift"), default=0.0)

    def __check_init__(self):
        check_choice("distribution", self.distribution, DISTRIBUTIONS)
        check_swept("sigma", self.sigma, lower=0.0, lower_open=True)
        check_swept("drift", self.drift)  # any finite value

    def _on_span(self, n_tokens: int, dim: int) -> bool:
        return self.distribution == "gaussian" and n_tokens < dim

    def gaussian_matrix(self):
        return (self.drift, self.sigma) if self.distribution == "gaussian" else None

    def draw_noise(self, key, n_tokens, dim, dtype):
        if self._on_span(n_tokens, dim):
            # Rows are tokens, so V x becomes x Vᵀ. A Gaussian M is rotation-invariant:
            # with A = C Q (LQ, Q orthonormal rows spanning A's rows), A Mᵀ = C (Q Mᵀ) and
            # Q Mᵀ is N × d i.i.d. N(0, 1), independent of the state. So N·d Gaussians
            # replace d², exactly in law, whatever the attention (any Q, K, heads).
            return random.normal(key, (n_tokens, dim), dtype)
        return sample_entries(key, (dim, dim), self.distribution, dtype)

    def apply_noise(self, attention_out, noise, *, depth):
        drift, scale = self.drift / depth, self.sigma / math.sqrt(depth)
        if self._on_span(*attention_out.shape[-2:]):
            return drift * attention_out + scale * matmul(lq(attention_out), noise)
        # V_n itself, d × d, then one product: no second pass over the N × d output (5 % of
        # a layer at N = 32, d = 16).
        dim = attention_out.shape[-1]
        v = drift * jnp.eye(dim, dtype=noise.dtype) + scale * noise
        return matmul(attention_out, v.T)

    @property
    def noise(self) -> str:
        return "matrix"

    def limit_coefficients(self):
        # Every law of unit variance has the same limit (003 Thm 1).
        return float(self.drift), float(self.sigma), 0.0


@final
class ScalarValues(AbstractScalarValues):
    """Scalar (hybrid) value noise (003 eq. 7): ``V_n = (1/L + ε v_n/√L)·I``.

    ``v_n`` is a scalar with mean 0 and variance 1 from ``distribution``. 003 eq. 7 assumes
    bounded v_n, so the default is Rademacher (±1); the other laws stay selectable. At
    finite L the law matters near ε_c when the layer step ε·e^β/(2√L) (USA) is not small:
    see :func:`attndyn.theory.hybrid_layer_step`. ``eps`` is an array leaf.
    """

    eps: Float[Array, ""] = eqx.field(converter=float_leaf("eps"), default=0.0)
    distribution: str = eqx.field(static=True, default="rademacher")

    def __check_init__(self):
        check_choice("distribution", self.distribution, DISTRIBUTIONS)
        check_swept("eps", self.eps, lower=0.0)

    def scale(self, *, key, depth, dtype):
        v = sample_entries(key, (), self.distribution, dtype)
        return 1.0 / depth + self.eps * v / math.sqrt(depth)

    def draw_noise(self, key, n_tokens, dim, dtype):
        return sample_entries(key, (), self.distribution, dtype)

    def apply_noise(self, attention_out, noise, *, depth):
        return (1.0 / depth + self.eps * noise / math.sqrt(depth)) * attention_out

    def multiplier_atoms(self, depth):
        # Rademacher is the one law here with atoms (v = ±1, probability ½ each).
        if self.distribution != "rademacher" or jnp.ndim(self.eps):
            return ()
        spread = float(self.eps) / math.sqrt(depth)
        return (1.0 / depth - spread, 1.0 / depth + spread)

    @property
    def noise(self) -> str:
        return "scalar"

    def limit_coefficients(self):
        return 1.0, 0.0, float(self.eps)
