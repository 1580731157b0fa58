"""Which reduced route a :class:`~attndyn.DiscreteTransformer` has at (N, d), or why none.

``DiscreteTransformer.reduction`` asks :func:`reduce_discrete`. The routes are built on the
model (they hold it and ask it for its parts); this module and the routes know it by its
interface only (imported for annotations), so that ``discrete`` imports them and nothing
here imports ``discrete``: no import cycle.
"""

import equinox as eqx

from ..._core.norms import RMSNorm
from ..base import LayerMaps, Reduction
from .chain import TwoTokenChain
from .frame import fits_frame
from .frame_route import ReducedTransformer
from .span import SpanTransformer


def reduction_blocker(model: LayerMaps, n_tokens: int, dim: int) -> str | None:
    """Why no reduced route applies to ``model`` at (N, d), or ``None`` if one does."""
    norm = model.scheme.norm
    if not (norm.rotation_invariant or centred_post_ln(model)):
        return (
            f"the {norm.name} norm centres the tokens (not rotation-invariant; under Post-LN "
            "without gain or bias its law is the RMS model in d − 1 dimensions, which the "
            "reduced route then simulates)"
        )
    space = norm.effective_dim(dim)
    if not fits_frame(n_tokens, space):
        where = f"d = {dim}" if space == dim else f"d − 1 = {space} (LayerNorm's hyperplane)"
        return f"N = {n_tokens} is not below {where}"
    att = model.attention
    if att.query is not None or att.key_matrix is not None:
        return "Q or K is not the identity"
    if att.n_heads != 1:
        return "multi-head attention acts on coordinate blocks (not rotation-invariant)"
    if not att.rotation_invariant:
        return "W_V or W_O is not the identity (not rotation-invariant)"
    if model.weights is not None:
        return "random weights Q, K, V are not rotation-invariant once drawn"
    values = model.values
    if values.gaussian_matrix() is None and not values.multiple_of_identity:
        return "the value matrices are not Gaussian (nor multiples of the identity)"
    if not model.scheme.rotation_equivariant:
        return f"the scheme {type(model.scheme).__name__} is not known to be rotation-equivariant"
    return None


def centred_post_ln(model: LayerMaps) -> bool:
    """Post-LN with a centred LayerNorm without gain or bias: *(derived, spec §0)* in law
    for Gaussian value matrices (exactly for multiples of I) the RMS model in d − 1
    dimensions, the tokens being unit vectors of the mean-zero hyperplane."""
    norm = model.scheme.norm
    return model.scheme.post_ln_map and norm.codimension == 1 and not norm.affine


def reduce_discrete(model: LayerMaps, n_tokens: int, dim: int) -> Reduction:
    """The reduced form of ``model`` at (N, d), or why it has none: the span route for
    values that are multiples of I (:class:`.span.SpanTransformer`); for Gaussian value
    matrices the two-token chain for N = 2 under Post-LN (:class:`.chain.TwoTokenChain`),
    the frame route otherwise (:class:`~attndyn.ReducedTransformer`).

    Centred LayerNorm (Post-LN) runs as the RMS model in d − 1 dimensions, its start
    centred and normalised first (as the model's first layer does): a uniform start on
    S^{d−1} becomes uniform on the unit sphere of the hyperplane, whose law is the RMS
    model's start in d − 1 dimensions."""
    blocker = reduction_blocker(model, n_tokens, dim)
    if blocker is not None:
        return Reduction(None, blocker)
    start = model.scheme.norm
    space = start.effective_dim(dim)
    if space != dim:
        model = eqx.tree_at(lambda m: m.scheme.norm, model, RMSNorm())
    if model.values.multiple_of_identity:
        return Reduction(SpanTransformer(model, n_tokens, space, start=start), "")
    if n_tokens == 2 and model.scheme.post_ln_map:
        return Reduction(TwoTokenChain(model, n_tokens, space, start=start), "")
    return Reduction(ReducedTransformer(model, n_tokens, space, start=start), "")
