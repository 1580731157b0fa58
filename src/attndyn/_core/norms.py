"""Token normalisations: RMS (the unit sphere S^{d−1}) and centred LayerNorm (spec §0).

Every scheme normalises through one of these objects (its ``norm`` field):

- :class:`RMSNorm` (the default): ``y ↦ y/|y|``, RMSNorm up to the constant √d. Tokens live on
  S^{d−1}.
- :class:`LayerNorm`: ``y ↦ (y − ȳ)/|y − ȳ|`` with ȳ the mean of y's d coordinates, then an
  optional affine map ``g ⊙ u + b``. Without the affine map tokens live on S^{d−2}, the unit
  sphere of the mean-zero hyperplane {Σ_k y_k = 0}.

Both put tokens at radius 1 so that β means the same thing for both: scores are
β⟨u_i, u_j⟩ with unit u. A real LayerNorm puts tokens at radius √d (y ↦ √d·(y − ȳ)/|y − ȳ|);
scores on those raw vectors are β·d⟨u_i, u_j⟩, so a real LayerNorm at β is this one at
β_eff = β·d (the same absorption of √d as for RMSNorm).

*(derived, spec §0)* Post-LN with :class:`LayerNorm` in d dimensions is, in law for Gaussian
value matrices (and exactly for deterministic or scalar values), the RMS model in d − 1
dimensions at the same β: with U a d × (d − 1) orthonormal basis of the hyperplane and
centred tokens θ = U c, one layer maps c to (c + UᵀMU a)/|…| with a = UᵀA, and UᵀMU has
i.i.d. N(0, σ²) entries when M does. Hence the two-token threshold d − 3 < cosh 2β
(:func:`attndyn.theory.beta_critical` with ``norm="layernorm"``).
"""

import abc
from typing import TYPE_CHECKING, ClassVar, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .errors import ParameterError, check_choice
from .names import NORM_NAMES as NORM_NAMES
from .sphere import normalize


class AbstractNorm(eqx.Module):
    """A token normalisation ``y ↦ norm(y)``, applied row by row."""

    if TYPE_CHECKING:
        name: ClassVar[str]
        codimension: ClassVar[int]
    else:
        name: eqx.AbstractClassVar[str]
        #: How many dimensions the geometry loses: tokens of R^d live on S^{d−1−codimension}.
        codimension: eqx.AbstractClassVar[int]

    @abc.abstractmethod
    def centre(self, y: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
        """The part of ``y`` that the norm sees (``y`` itself, or ``y`` centred)."""

    @abc.abstractmethod
    def __call__(self, y: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
        """The normalised rows."""

    @property
    def rotation_invariant(self) -> bool:
        """Whether the norm commutes with every rotation of R^d (what the reduced route
        needs)."""
        return False

    @property
    def affine(self) -> bool:
        """Whether the norm has a gain or bias (its output is then not a unit vector)."""
        return False

    def direction(self, y: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
        """The unit direction of the centred part, without any affine map."""
        return normalize(self.centre(y))

    def safe(self, y: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
        """:meth:`__call__`, but 0 where the centred row is exactly 0 (instead of 0/0 =
        NaN); non-finite rows stay non-finite, so overflow is still reported."""
        c = self.centre(y)
        zero = jnp.all(c == 0, axis=-1, keepdims=True)
        return self._affine(jnp.where(zero, jnp.zeros_like(c), normalize(c)))

    def _affine(self, unit: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
        return unit

    def effective_dim(self, dim: int) -> int:
        """The dimension of the RMS model with the same law (d, or d − 1 for LayerNorm)."""
        return dim - self.codimension


@final
class RMSNorm(AbstractNorm):
    """``y ↦ y/|y|``: tokens on the unit sphere S^{d−1} (seed 003, seed 004)."""

    name: ClassVar[str] = "rms"
    codimension: ClassVar[int] = 0

    def centre(self, y):
        return y

    def __call__(self, y):
        return normalize(y)

    @property
    def rotation_invariant(self) -> bool:
        return True


@final
class LayerNorm(AbstractNorm):
    """Centred LayerNorm (seeds 000-002) at radius 1: ``y ↦ g ⊙ (y − ȳ)/|y − ȳ| + b``.

    Without ``gain`` and ``bias`` (the default) tokens are unit vectors of the mean-zero
    hyperplane: the dynamics are those of the RMS model in d − 1 dimensions at the same β
    (module docstring). A real LayerNorm at radius √d with inverse temperature β is this one
    at β·d. ``gain`` and ``bias`` are vectors of length d (array leaves); with them the
    tokens leave the sphere and no reduction to d − 1 dimensions holds.

    A row whose coordinates are all equal has no direction: it maps to NaN, except in
    :meth:`safe` (used for the sub-layer outputs of Peri-LN and nGPT), which maps it to 0.
    """

    gain: Float[Array, "..."] | None = None
    bias: Float[Array, "..."] | None = None
    name: ClassVar[str] = "layernorm"
    codimension: ClassVar[int] = 1

    def __check_init__(self):
        for label, vector in (("gain", self.gain), ("bias", self.bias)):
            if vector is not None and jnp.ndim(vector) != 1:
                raise ParameterError(
                    f"LayerNorm {label} must be a vector of length d; got shape "
                    f"{jnp.shape(vector)}."
                )

    @property
    def affine(self) -> bool:
        return self.gain is not None or self.bias is not None

    def centre(self, y):
        return y - jnp.mean(y, axis=-1, keepdims=True)

    def _affine(self, unit):
        shape = (1,) * (unit.ndim - 1) + (unit.shape[-1],)
        for label, vector in (("gain", self.gain), ("bias", self.bias)):
            if vector is not None and vector.shape[0] != unit.shape[-1]:
                raise ParameterError(
                    f"LayerNorm {label} has length {vector.shape[0]} but the tokens have "
                    f"d = {unit.shape[-1]} coordinates."
                )
        if self.gain is not None:
            unit = unit * self.gain.astype(unit.dtype).reshape(shape)
        if self.bias is not None:
            unit = unit + self.bias.astype(unit.dtype).reshape(shape)
        return unit

    def __call__(self, y):
        return self._affine(normalize(self.centre(y)))


def as_norm(value: "AbstractNorm | str") -> AbstractNorm:
    """Converter: a norm object, or its name (``"rms"``, ``"layernorm"``)."""
    if isinstance(value, AbstractNorm):
        return value
    check_choice("norm", value, NORM_NAMES)
    return RMSNorm() if value == "rms" else LayerNorm()
