"""Why trajectories turned NaN or infinite: maps the model itself leaves undefined at its
parameters (:meth:`AbstractModel.undefined_maps`), formulas of its own that overflow
(:meth:`AbstractModel.overflow_causes`, e.g. the USA overlap diffusion's e^{2β}), and
thresholds from the float type.

The estimator knows models only as pytrees: it looks at their attention cores and their
scalar parameters (σ, drift, ε, ...), never at their classes.

- Unnormalised attention weighs token j by ``exp(β⟨Q x_i, K x_j⟩)/N``. On the unit sphere
  the exponent is at most ``β‖Q‖‖K‖`` (spectral norms; plus −c for a diagonal shift
  c < 0, and a bound of ‖B‖ holding but with probability < 10⁻²⁰ for random weights), and
  the layer takes squared norms of the weighted sums: these overflow once ``2β‖Q‖‖K‖``
  passes ``ln(max)`` of the float type, i.e. ``β‖Q‖‖K‖ ≳ 44.4`` in float32 (354.9 in
  float64), well before ``exp`` itself overflows (88.7). Models whose scheme ignores a
  factor shared by a row and its update (:meth:`AbstractModel.attention_scale_free`:
  Post-LN, sqrt-scaling, nGPT, Peri-LN) carry that factor as an exponent and never
  overflow; for the others :func:`overflow_refusal` refuses such a β before anything
  runs.
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
from .._core.weights import RandomWeights
from .._models.base import OVERFLOW_MARGIN, AbstractModel, exp_square_threshold


def float_type() -> np.dtype:
    """The float type the simulations run in (float32 unless ``jax_enable_x64``)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))


def attention_threshold(
    core: Attention, dtype: np.dtype, *, form_bound: float = 1.0
) -> tuple[float, float]:
    """(The largest score ``core`` can give unit tokens, β·‖Q‖‖K‖ plus a negative
    diagonal shift's −c, and the value above which its unnormalised weights overflow).
    ``form_bound`` bounds the norm of random weights' B = QᵀK (1 without them)."""
    scale = form_bound
    for matrix in (core.query, core.key_matrix):
        if matrix is not None:
            scale *= float(
                np.max(np.linalg.norm(np.asarray(matrix, np.float64), ord=2, axis=(-2, -1)))
            )
    exponent = float(core.beta) * scale
    if core.diagonal_shift is not None:
        exponent += max(0.0, -float(core.diagonal_shift))
    return exponent, exp_square_threshold(dtype)


def _cores(model: AbstractModel):
    """``(name, leaf)`` of every leaf of ``model``, attention cores and random weights
    whole."""
    whole = lambda x: isinstance(x, Attention | RandomWeights)  # noqa: E731
    for path, leaf in jax.tree_util.tree_flatten_with_path(model, is_leaf=whole)[0]:
        yield jax.tree_util.keystr(path).lstrip("."), leaf


def _form_bound(model: AbstractModel, dim: int) -> float:
    """A bound on ‖QᵀK‖ of the model's random weights (1 without any)."""
    bounds = [leaf.form_bound(dim) for _, leaf in _cores(model) if isinstance(leaf, RandomWeights)]
    return max(bounds, default=1.0)


def overflow_refusal(model: AbstractModel, dtype: np.dtype, dim: int) -> str | None:
    """Why ``model`` would overflow ``dtype`` wherever it runs, known before it runs (its
    unnormalised attention's weights under a scheme that needs them whole, a formula of its
    own such as the USA overlap drift's e^{2β}), as one sentence naming what to change; or
    ``None``."""
    causes = list(model.overflow_causes(dtype))
    if not model.attention_scale_free():
        form = _form_bound(model, dim)
        for name, leaf in _cores(model):
            if isinstance(leaf, Attention) and leaf.kind == "unnormalized":
                causes += _unnormalized_causes(name, leaf, dtype, form, refusing=True)
    if not causes:
        return None
    return causes[0][0].upper() + causes[0][1:]


def overflow_causes(model: AbstractModel) -> list[str]:
    """The parameters of ``model`` that put it past the overflow of the float type."""
    dtype = float_type()
    causes = []
    for name, leaf in _cores(model):
        if isinstance(leaf, RandomWeights):
            continue
        if isinstance(leaf, Attention):
            if not (leaf.kind == "unnormalized" and model.attention_scale_free()):
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


def _unnormalized_causes(
    name: str, core: Attention, dtype: np.dtype, form: float = 1.0, *, refusing: bool = False
) -> list[str]:
    exponent, threshold = attention_threshold(core, dtype, form_bound=form)
    if exponent + math.log(OVERFLOW_MARGIN) < threshold:
        return []
    how = "pass x64=True (CLI: --x64; limit 354.9), lower β" if dtype == np.float32 else "lower β"
    if refusing:
        how += ", or use a scheme that normalises its update (Post-LN, sqrt-scaling, nGPT, Peri-LN)"
    return [
        f"unnormalised attention ({name}.beta): β·‖Q‖‖K‖ = {exponent:.4g} is near or above "
        f"{threshold:.1f} = ½·ln(max {dtype.name}), where the squared norms of its weights "
        f"exp(β⟨Qx_i, Kx_j⟩) overflow{' under this scheme' if refusing else ''}; "
        f"{how}, or use softmax attention"
    ]


def attention_causes(name: str, core: Attention, dtype: np.dtype) -> list[str]:
    """Why attention ``core`` may leave a trajectory non-finite at its β (see the module
    docstring), or nothing."""
    exponent, _ = attention_threshold(core, dtype)
    if core.kind == "unnormalized":
        return _unnormalized_causes(name, core, dtype)
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


def _solvers(model: AbstractModel) -> list[str]:
    """The names of the ODE or SDE integrators inside ``model`` (none for a layer map)."""
    from .._models.integrators import ODEIntegrator, SDEIntegrator

    kinds = (ODEIntegrator, SDEIntegrator)
    leaves = jax.tree_util.tree_flatten_with_path(model, is_leaf=lambda x: isinstance(x, kinds))
    return [jax.tree_util.keystr(p).lstrip(".") for p, leaf in leaves[0] if isinstance(leaf, kinds)]


def overflow_message(model: AbstractModel, *, radius: float = 1.0) -> str:
    """One sentence naming the causes (maps undefined at the model's parameters, then
    overflows, the start radius included), or saying that no parameter is past its
    threshold, with the checks that apply to the model (its solver, where it has one)."""
    causes = model.undefined_maps() + overflow_causes(model) + model.overflow_causes(float_type())
    causes += scalar_overflow("radius", float(radius), float_type())
    if causes:
        return "Cause: " + "; ".join(causes) + "."
    solvers = _solvers(model)
    check = (
        f"check its solver and step ({', '.join(solvers)}: a failed solve, e.g. max_steps "
        "reached, is reported as NaN)"
        if solvers
        else "its layer map is the suspect"
    )
    return (
        f"No parameter of the model is past its {float_type().name} overflow threshold "
        "(unnormalised attention's β·‖Q‖‖K‖ < ½·ln max, scalars < √max/1000) and none of its "
        f"maps is known to be undefined at its parameters: {check}; run the trajectory "
        "alone from its key to see where it breaks."
    )
