"""Seed 002's finite step: transformers as unrolled Laplacian-eigenmaps descent (spec §1).

Seed 002 (§3) writes one attention block at initialisation as a gradient step on
L_data = tr(L̃ (XXᵀ + βI)), L̃ = I − softmax(κXXᵀ − βI − M), with L̃ held fixed
(stop-grad), followed by the projection onto its constraint set (rows of zero mean and
unit norm: a centred LayerNorm):

    X ← X + 2η (softmax(κXXᵀ − βI − M) − I) X,    X ← LayerNorm(X).

Here κ is the inverse temperature (attndyn's β of the scores), the seed's β is a shift of
the self-scores (:attr:`EigenmapsStep.shift`), M a mask (``self_mask=True``: M = ∞·I, no
self-adjacency) and η ≤ ½ the step. Seed 002 argues η ≤ ½ "to avoid magnitudes of the
updates being too large": the step is the convex combination (1 − 2η)X + 2η·P X, P
row-stochastic, so no row grows beyond the largest one; for η > ½ the weight 1 − 2η is
negative and rows can grow (two antipodal tokens with the self-mask: |x'| = |1 − 4η|).

As an attention layer it is Laplacian attention (P − I) at inverse temperature κ with
deterministic values V = I/L and step 1/L = 2η: :func:`attndyn.eigenmaps_transformer` builds
that :class:`DiscreteTransformer` (t = 2ηn).

Claims of the seed checked in ``tests/test_eigenmaps.py``: the step is gradient descent on
L_data exactly when L̃ is symmetric (two tokens; in general the gradient is (L̃ + L̃ᵀ)X, not
the seed's 2L̃X); it keeps rows in the mean-zero hyperplane, so the LayerNorm after it only
rescales; its regulariser step X ← X − 2η/(β + d_q)·X is undone by the LayerNorm; the
self-mask gives A_ii = 0.
"""

from typing import final

import equinox as eqx
from jaxtyping import Array, Float

from .attention import Attention, float_leaf, optional_float_leaf
from .errors import check_bound


@final
class EigenmapsStep(eqx.Module):
    """``X ↦ X + 2η(softmax(κXXᵀ − βI − M) − I)X`` (seed 002), before its LayerNorm.

    Args:
        eta: the step η in (0, ½] (seed 002 uses 0.4).
        kappa: the inverse temperature κ ≥ 0 of the scores (seed 002 uses 30).
        shift: the seed's β, subtracted from the self-scores (default none).
        self_mask: forbid self-adjacency (M = ∞·I).
        kind: ``"softmax"`` (the seed's σ) or ``"unnormalized"``.
    """

    eta: Float[Array, ""] = eqx.field(converter=float_leaf("eta"), default=0.4)
    kappa: Float[Array, ""] = eqx.field(converter=float_leaf("kappa"), default=30.0)
    shift: Float[Array, ""] | None = eqx.field(converter=optional_float_leaf("shift"), default=None)
    self_mask: bool = eqx.field(static=True, default=False)
    kind: str = eqx.field(static=True, default="softmax")

    def __check_init__(self):
        check_bound("eta", self.eta, lower=0.0, upper=0.5, lower_open=True)
        self.attention()  # validates κ, the shift and the kind

    def attention(self) -> Attention:
        """Laplacian attention ``(P − I)X`` with scores κ⟨x_i, x_j⟩ − β δ_ij (masked)."""
        return Attention(
            self.kappa,
            kind=self.kind,
            laplacian=True,
            self_mask=self.self_mask,
            diagonal_shift=self.shift,
        )

    @property
    def layer_step(self) -> float:
        """The step 2η of the layer map in attndyn's time (t = 2ηn)."""
        return 2.0 * float(self.eta)

    def __call__(self, x: Float[Array, "N d"]) -> Float[Array, "N d"]:
        """The update, before the LayerNorm."""
        return x + (2 * self.eta).astype(x.dtype) * self.attention()(x)
