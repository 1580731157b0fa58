"""How long a numerically merged pair of tokens stays merged in the true dynamics.

Two tokens whose coordinates agree to the float's resolution are one token to the
arithmetic from then on (identical rows get identical updates), while the true dynamics
keep a gap g = 1 − ⟨θ_i, θ_j⟩ of at most δ (the resolution, :func:`resolution_gap`). Their
class is the dynamics' as long as the true gap stays below the clustering tolerance, so the
question is how likely the gap is ever to grow back from δ to ``tol``.

*(derived)* The law of the gap. For Post-LN with value operator V_n = a·I/L + σΞ_n/√L
(Ξ_n with i.i.d. unit entries: full value noise) or V_n = (I/L)(1 + ε v_n√L) (scalar
noise), the diffusion limit of spec §3.2/§3.3 with the deterministic attention drift
a·P_θ(A) gives, for *any* pair in a configuration of N tokens, the overlap identity of 003
App. C (the one :mod:`attndyn.theory._clusters` uses for two clusters). Expanding it about
a merged pair θ_i = θ + u/2, θ_j = θ − u/2 (g = |u|²/2, v = u/|u| tangent at θ), with A the
attention output at θ over all N tokens and K = DA its derivative in the query (βC with C the
attention-weighted covariance of the tokens for softmax, β·(1/N)Σ e^{β⟨θ, θ_k⟩} θ_k θ_kᵀ
unnormalised; A_i − A_j = K u), log g is, to leading order in g, a diffusion with

    matrix noise:  μ = −2a(α − k) + σ²(−(d − 1)p + (d − 3)m),   ν = 4σ²(p + m)
    scalar noise:  μ = r − ε²(4αk + w − m − 4α² + p) − ½ε²r²,     ν = ε²r²

where α = ⟨θ, A⟩, p = |A|², k = ⟨v, Kv⟩, m = |Kv|², w = ⟨v, A + KᵀY⟩², r = −2(α − k), and d
the dimension the noise acts in (d − 1 for a centred LayerNorm). Two tokens alone (K = 0,
A = θ) give back spec §4: κ₊ = (d − 1)/2 for full noise, +1 attracting iff ε² < 2 (softmax)
or ε² < 2e^{−β} (unnormalised) for scalar noise. At an antipodal pair θ_j = −θ_i the same
holds for full noise with K replaced by (K(θ) + K(−θ))/2, provided the attention outputs
cancel (A_i + A_j = 0: a symmetric configuration); otherwise the pair is pushed off −1 at
the rate ½σ²(d − 1)|A_i + A_j|², which the arithmetic follows, and no power law holds.

*(derived)* The bound. If λ·μ + λ²ν/2 ≤ 0 for every gap direction v, e^{λ log g} is a
supermartingale, and the gap returns from δ to ``tol`` with probability at most
(δ/tol)^λ. The direction v is lost in a merge, so the worst case over v is taken, with
k ∈ [0, t], m ≤ (t + b)², w ≥ 0, where t = tr(P_θ K P_θ) ≥ ‖P_θ K P_θ‖ (K is positive
semi-definite for both attention kinds) and b = |P_θ K θ|. The largest such λ is the
pair's exponent κ (:meth:`MergeLaw.exponents`): the least of −2μ/ν at the corners of
that range for full noise (a ratio linear in k and linear-fractional in m), bisection on
an exact maximum of a quadratic for scalar noise, +∞ where the deterministic dynamics
contract the gap (no noise, μ < 0), and none (no bound) where some direction could grow
it (the hybrid model above ε_c, for instance, where +1 repels).

What the bound assumes, stated: the diffusion limit (as for early absorption: the
discrete model at finite L is close to it), and that between save times the pair's
exponent is no smaller than the least value it has at the save times since the merge
(the estimator evaluates it there, :func:`merge_bounds`). A factor 2 covers the smooth
corrections, as in :mod:`.reduced.absorption`.
"""

import dataclasses
import math

import numpy as np

#: The factor of :mod:`.reduced.absorption` for the smooth corrections to a power law.
SAFETY = 2.0
#: A merged pair's coordinates agree to within this many units in the last place (the
#: merge test asks for one; the arithmetic's own error in the gap is a few).
RESOLUTION_ULPS = 4.0
#: Bisection steps for the scalar-noise exponent (relative precision 2⁻⁶⁰).
_BISECTIONS = 60


def resolution_gap(dtype, n_coordinates: int) -> float:
    """δ: the largest 1 − z of a pair that the float type calls merged, with a margin:
    coordinates of unit vectors within :data:`RESOLUTION_ULPS` ulp(1) of each other."""
    unit = float(np.spacing(np.asarray(1.0, dtype)))
    return 0.5 * n_coordinates * (RESOLUTION_ULPS * unit) ** 2


@dataclasses.dataclass(frozen=True)
class MergeLaw:
    """The diffusion law of a merged pair's gap for one model (module docstring).

    ``kind``: ``"softmax"`` or ``"unnormalized"``; ``beta``; ``dim``: the dimension the
    value noise acts in; ``drift``: a; ``sigma``: full value noise σ; ``eps``: scalar noise
    ε (a model has one kind of noise or none)."""

    kind: str
    beta: float
    dim: int
    drift: float = 0.0
    sigma: float = 0.0
    eps: float = 0.0

    def exponents(self, theta: np.ndarray, antipodal: np.ndarray) -> np.ndarray:
        """κ for merged pairs. ``theta`` (B, N, k): unit rows of B configurations;
        ``antipodal`` (B, N, N) bool, per pair (i, j) whether it is merged at −1 (else at
        +1). Returns (B, N, N): κ ≥ 0 (+∞: the gap contracts surely), or NaN where no
        bound holds."""
        theta = np.asarray(theta, np.float64)
        gram = theta @ np.swapaxes(theta, -1, -2)
        weights, top = self._weights(gram)
        alpha = np.sum(weights * gram, axis=-1)  # ⟨θ_i, A_i⟩
        p = _quadratic(weights, gram)  # |A_i|²
        # t = tr(P K P) and the coefficients of Kθ_i on the tokens (for b = |P K θ_i|).
        keep = 1.0 if self.kind == "softmax" else 0.0
        t = self.beta * (np.einsum("bij,bij->bi", weights, 1 - gram**2) - keep * (p - alpha**2))
        coefficients = self.beta * weights * (gram - keep * alpha[..., None])
        plus = self._plus(alpha, p, t, coefficients, gram, np.exp(-top))
        kappa = np.minimum(plus[:, :, None], plus[:, None, :])
        b, i, j = np.nonzero(np.asarray(antipodal) & ~np.eye(gram.shape[-1], dtype=bool))
        if b.size:
            kappa[b, i, j] = self._minus(weights, top, t, coefficients, gram, b, i, j)
        return kappa

    def _weights(self, gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The attention weights of each query row, each row divided by its largest
        unnormalised weight e^{M_i} (softmax rows are already normalised: M_i = 0), and
        M (B, N).

        Unnormalised weights e^{βz}/N overflow float64 from β ≈ 709, and the squared
        quantities built on them (|A|², |Kv|²) from β ≈ 354: the issue-42 run at β = 350
        printed overflow warnings and found no bound. Every term of μ and ν is of degree 2
        in the weights except the attention drift's (−2a(α − k) for full noise, r for
        scalar noise), of degree 1, so κ is computed on the divided weights with that
        term multiplied by e^{−M_i} (log space, the scale apart): the same κ at any β."""
        scores = self.beta * gram
        top = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - top)
        if self.kind == "softmax":
            return e / e.sum(axis=-1, keepdims=True), np.zeros(gram.shape[:-1])
        return e / gram.shape[-1], top[..., 0]

    def _plus(self, alpha, p, t, coefficients, gram, shrink) -> np.ndarray:
        """κ of a pair merged at +1 at each token (B, N), from the divided weights
        (:meth:`_weights`)."""
        ky_sq = _quadratic(coefficients, gram)
        ky_radial = np.sum(coefficients * gram, axis=-1)
        b = np.sqrt(np.maximum(ky_sq - ky_radial**2, 0.0))
        m_hi = (t + b) ** 2
        if self.eps > 0:
            return self._scalar(alpha, p, t, m_hi, shrink)
        return self._matrix(alpha, p, t, m_hi, shrink)

    def _minus(self, weights, top, t, coefficients, gram, b, i, j) -> np.ndarray:
        """κ of the pairs (i, j) of configurations b merged at −1: full noise without
        drift, in symmetric configurations (A_i + A_j = 0 to rounding); NaN otherwise.

        Here the sum E = A_i + A_j drives the gap h = 1 + z (μ, ν as at +1 with p =
        −⟨A_i, A_j⟩ and m = |Jv|², J = dE/du with θ_i = θ + u/2, θ_j = −θ + u/2): the query
        part (K(θ) + K(−θ))/2 and the keys i and j, which both move by u/2 and add
        (s(θ) + s(−θ))/2·u, s(q) the weight of keys i and j at query q. Two tokens alone
        give J = I and spec §4's κ₋ = ½ − (d − 2)/(2 cosh 2β)."""
        if self.drift != 0 or self.eps > 0 or self.sigma == 0:
            return np.full(b.shape, np.nan)
        g = gram[b]
        # Both rows on the scale of the larger (every term here is of degree 2 in the
        # weights, drift-free: κ does not depend on the common scale).
        common = np.maximum(top[b, i], top[b, j])
        scale_i, scale_j = np.exp(top[b, i] - common), np.exp(top[b, j] - common)  # ≤ 1
        w_i, w_j = weights[b, i] * scale_i[:, None], weights[b, j] * scale_j[:, None]

        def quadratic(x, y):
            return np.einsum("pk,pkl,pl->p", x, g, y)

        e_sq = quadratic(w_i + w_j, w_i + w_j)  # |A_i + A_j|²
        p = -quadratic(w_i, w_j)  # −⟨A_i, A_j⟩
        t_pair = 0.5 * (t[b, i] * scale_i + t[b, j] * scale_j)
        diff = 0.5 * (coefficients[b, i] * scale_i[:, None] - coefficients[b, j] * scale_j[:, None])
        radial = np.einsum("pk,pk->p", diff, g[np.arange(b.size), i])
        g_perp = np.sqrt(np.maximum(quadratic(diff, diff) - radial**2, 0.0))
        keys = 0.5 * (w_i[np.arange(b.size), i] + w_i[np.arange(b.size), j])
        keys = keys + 0.5 * (w_j[np.arange(b.size), i] + w_j[np.arange(b.size), j])
        m_hi = (keys + t_pair + g_perp) ** 2
        kappa = self._matrix(np.zeros_like(p), p, t_pair, m_hi)
        # Cancelling outputs to a relative 10⁻⁵ (the rounding of a saved state that
        # merged): the pair is symmetric; otherwise it is pushed off −1 (no power law).
        return np.where(e_sq <= 1e-10 * np.maximum(p, 1e-300), kappa, np.nan)

    def _matrix(self, alpha, p, t, m_hi, shrink=1.0) -> np.ndarray:
        """Full noise (and no noise): min over the gap's direction of κ = −2μ/ν. With a
        drift a the ratio is linear in k and linear-fractional in m, so its least value over
        k ∈ [0, t], m ∈ [0, m_hi] is at a corner; where ν = 0 (no noise), κ = ∞ if μ < 0
        at every corner, else no bound. ``shrink``: the weights' scale divided out
        (:meth:`_weights`), which the drift term, of degree 1, keeps."""
        a, s2, d = self.drift * shrink, self.sigma**2, self.dim
        corners = []
        for k in (np.zeros_like(t), t):
            for m in (np.zeros_like(m_hi), m_hi):
                mu = -2 * a * (alpha - k) + s2 * (-(d - 1) * p + (d - 3) * m)
                nu = 4 * s2 * (p + m)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(nu > 0, -2 * mu / nu, np.where(mu < 0, np.inf, np.nan))
                corners.append(ratio)
        kappa = np.min(corners, axis=0)  # NaN anywhere: no bound
        return np.where(kappa > 0, kappa, np.nan)

    def _scalar(self, alpha, p, t, m_hi, shrink) -> np.ndarray:
        """Scalar noise: the largest λ for which max over k ∈ [0, t] of
        h(k) = c₀ + c₁k + c₂k² is ≤ 0 (module docstring; w ≥ 0 dropped, m ≤ m_hi), with
        the weights' scale divided out (:meth:`_weights`): the drift r's terms, of degree
        1, keep ``shrink``."""
        e2 = self.eps**2

        def worst(lam):
            c0 = -2 * shrink * alpha + 2 * e2 * alpha**2 - e2 * p + e2 * m_hi
            c0 = c0 + 2 * lam * e2 * alpha**2
            c1 = 2 * shrink - 4 * lam * e2 * alpha
            c2 = 2 * e2 * (lam - 1)
            ends = np.maximum(c0, c0 + c1 * t + c2 * t**2)
            with np.errstate(divide="ignore", invalid="ignore"):
                vertex = np.clip(-c1 / (2 * c2), 0.0, t)
            inside = np.where(c2 < 0, c0 + c1 * vertex + c2 * vertex**2, -np.inf)
            return np.maximum(ends, inside)

        feasible = worst(np.zeros_like(alpha)) < 0
        low, high = np.zeros_like(alpha), np.ones_like(alpha)
        for _ in range(200):  # grow the bracket until infeasible (or hopelessly large)
            grow = feasible & (worst(high) <= 0) & (high < 1e12)
            if not grow.any():
                break
            low, high = np.where(grow, high, low), np.where(grow, 2 * high, high)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (low + high)
            ok = worst(mid) <= 0
            low, high = np.where(ok, mid, low), np.where(ok, high, mid)
        return np.where(feasible & (low > 0), low, np.nan)


def law_of(
    attention, dim: int, *, drift: float = 0.0, sigma: float = 0.0, eps: float = 0.0
) -> MergeLaw | None:
    """The merge law of Post-LN dynamics with this attention in ``dim`` dimensions (the
    dimension the noise acts in), or ``None`` where it is not derived: the law needs
    Q = K = I, one head, no W_V or W_O, no Laplacian, mask or diagonal shift, and finite
    parameters (array leaves read as numbers: models are concrete where it is asked)."""
    plain = (
        attention.query is None
        and attention.key_matrix is None
        and attention.n_heads == 1
        and attention.rotation_invariant
        and not any(attention.laplacian_flags)
        and not attention.causal
        and not attention.self_mask
        and attention.diagonal_shift is None
    )
    numbers = [float(np.asarray(v)) for v in (attention.beta, drift, sigma, eps)]
    if not plain or not all(math.isfinite(v) for v in numbers):
        return None
    beta, drift, sigma, eps = numbers
    return MergeLaw(attention.kind, beta, int(dim), drift=drift, sigma=sigma, eps=eps)


def _quadratic(rows: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """|Σ_k c_ik θ_k|² for each row i of ``rows`` (B, N, N): c_i G c_iᵀ, by matrix
    products (the three-index einsum was ten times slower at N = 50)."""
    return np.sum((rows @ gram) * rows, axis=-1)


def pair_bound(kappa: np.ndarray, delta: float, tol: float) -> np.ndarray:
    """2(δ/tol)^κ (at most 1): the chance that a pair merged at gap δ with exponent κ
    returns to ``tol``; 0 for κ = +∞, NaN where there is no bound."""
    with np.errstate(over="ignore", invalid="ignore"):
        bound = SAFETY * np.exp(np.asarray(kappa) * math.log(delta / tol))
    return np.where(np.isnan(kappa), np.nan, np.minimum(bound, 1.0))
