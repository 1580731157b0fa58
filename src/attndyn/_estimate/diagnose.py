"""Why trajectories turned NaN or infinite: maps the model itself leaves undefined at its
parameters (:meth:`AbstractModel.undefined_maps`), formulas of its own that overflow
(:meth:`AbstractModel.overflow_causes`, e.g. the USA overlap diffusion's e^{2β}), and
thresholds from the float type.

The estimator knows models only as pytrees: it looks at their attention cores and their
scalar parameters (σ, drift, ε, ...), never at their classes.

- Unnormalised attention weighs token j by ``exp(β⟨Q x_i, K x_j⟩)/N``. On the unit sphere
  the exponent is at most ``β‖Q‖‖K‖`` (spectral norms), and the layer takes squared norms
  of the weighted sums: these overflow once ``2β‖Q‖‖K‖`` passes ``ln(max)`` of the float
  type, i.e. ``β‖Q‖‖K‖ ≳ 44.4`` in float32 (354.9 in float64), well before ``exp`` itself
  overflows (88.7).
- Softmax attention never overflows, but its scores β⟨Q x_i, K x_j⟩ carry an absolute
  rounding error of about ``β‖Q‖‖K‖·eps``. Once that passes ``ln(max)``, two roundings of
  one score (XLA fuses the small products into both the row maximum and the exponentials)
  can differ by more than ``exp`` can take, every weight of a row underflows and the row
  is 0/0: from ``β‖Q‖‖K‖ ≈ 7.4·10⁸`` in float32 (3.2·10¹⁸ in float64), flagged from a
  factor 10 below.
- A scalar parameter overflows when its square does: ``|value| ≳ √max`` (1.8·10¹⁹ in
  float32).

Both are flagged from a factor 10³ below the threshold (ln 10³ ≈ 6.9 in β), since the
layers multiply them by further factors (σ/√L, √d, N, ...).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._core.attention import Attention
from .._models.base import OVERFLOW_MARGIN, AbstractModel, exp_square_threshold


def float_type() -> np.dtype:
    """The float type the simulations run in (float32 unless ``jax_enable_x64``)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))


def attention_threshold(core: Attention, dtype: np.dtype) -> tuple[float, float]:
    """(β·‖Q‖‖K‖ of ``core``, the value above which its unnormalised weights overflow)."""
    scale = 1.0
    for matrix in (core.query, core.key_matrix):
        if matrix is not None:
            scale *= float(
                np.max(np.linalg.norm(np.asarray(matrix, np.float64), ord=2, axis=(-2, -1)))
            )
    return float(core.beta) * scale, exp_square_threshold(dtype)


def overflow_causes(model: AbstractModel) -> list[str]:
    """The parameters of ``model`` that put it past the overflow of the float type."""
    dtype = float_type()
    causes = []
    is_core = lambda x: isinstance(x, Attention)  # noqa: E731
    for path, leaf in jax.tree_util.tree_flatten_with_path(model, is_leaf=is_core)[0]:
        name = jax.tree_util.keystr(path).lstrip(".")
        if isinstance(leaf, Attention):
            causes += attention_causes(name, leaf, dtype)
            continue
        array = np.asarray(leaf) if isinstance(leaf, jax.Array | np.ndarray) else None
        if array is not None and array.ndim == 0 and np.issubdtype(array.dtype, np.floating):
            causes += scalar_overflow(name, float(array), dtype)
    return causes


def softmax_resolution(dtype: np.dtype) -> float:
    """β‖Q‖‖K‖ above which a float score's rounding (β‖Q‖‖K‖·eps) passes ln(max): 7.4·10⁸
    in float32, 3.2·10¹⁸ in float64."""
    info = np.finfo(dtype)
    return math.log(float(info.max)) / float(info.eps)


def attention_causes(name: str, core: Attention, dtype: np.dtype) -> list[str]:
    """Why attention ``core`` may leave a trajectory non-finite at its β (see the module
    docstring), or nothing."""
    exponent, threshold = attention_threshold(core, dtype)
    if core.kind == "unnormalized" and exponent + math.log(OVERFLOW_MARGIN) >= threshold:
        return [
            f"unnormalised attention ({name}.beta): β·‖Q‖‖K‖ = {exponent:.4g} is "
            f"near or above {threshold:.1f} = ½·ln(max {dtype.name}), where the "
            "squared norms of its weights exp(β⟨Qx_i, Kx_j⟩) overflow; lower β, use "
            f"softmax attention{_x64_hint(dtype)}"
        ]
    resolution = softmax_resolution(dtype)
    if core.kind == "softmax" and exponent * SOFTMAX_MARGIN >= resolution:
        return [
            f"softmax attention ({name}.beta): β·‖Q‖‖K‖ = {exponent:.4g} is near or above "
            f"{resolution:.2g} = ln(max)/eps of {dtype.name}, where the rounding of its scores "
            "passes what exp can take and a row's weights can all underflow (0/0); lower β "
            "or run a reduced route (Q = K = I, N < d)"
            + (" or in float64 (--x64, x64=True)" if dtype == np.float32 else "")
        ]
    return []


#: Softmax scores are flagged from this factor below :func:`softmax_resolution` (the
#: rounding of a score is up to a few ulps of β‖Q‖‖K‖).
SOFTMAX_MARGIN = 10.0


def scalar_overflow(name: str, value: float, dtype: np.dtype) -> list[str]:
    """The cause, if ``value`` is within :data:`.base.OVERFLOW_MARGIN` of √max, where its square
    overflows (a model's σ or drift, the start radius)."""
    limit = math.sqrt(float(np.finfo(dtype).max))
    if abs(value) * OVERFLOW_MARGIN < limit:
        return []
    return [
        f"{name}={value:.3g} is near or above √(max {dtype.name}) ≈ {limit:.2g}, where its "
        "square overflows; lower it"
    ]


def _x64_hint(dtype: np.dtype) -> str:
    if dtype == np.float32:
        return " or enable float64 (jax.config.update('jax_enable_x64', True): threshold 354.9)"
    return ""


def overflow_message(model: AbstractModel, *, radius: float = 1.0) -> str:
    """One sentence naming the causes (maps undefined at the model's parameters, then
    overflows, the start radius included), or saying that no parameter is past its
    threshold."""
    causes = model.undefined_maps() + overflow_causes(model) + model.overflow_causes(float_type())
    causes += scalar_overflow("radius", float(radius), float_type())
    if causes:
        return "Cause: " + "; ".join(causes) + "."
    return (
        f"No parameter of the model is past its {float_type().name} overflow threshold "
        "(unnormalised attention's β·‖Q‖‖K‖ < ½·ln max, scalars < √max/1000) and none of its "
        "maps is known to be undefined at its parameters: check the solver and its step (a "
        "failed ODE solve, e.g. max_steps reached, is reported as NaN), or "
        "the model's own arithmetic (e.g. a normalisation of a zero vector, such as a Pre-LN "
        "radius that a ±1 multiplier walk brings to exactly 0)."
    )
