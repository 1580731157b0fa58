"""The long-context threshold as published: Chen, Lin, Polyanskiy and Rigollet, "Critical
attention scaling in long-context transformers", arXiv:2510.05554 (ICLR 2026).

Their setting (§2 of the paper; docs/references.md#chen-2025). n tokens x_i ∈ R^d with
Q = K = V = I, a pre-layer-norm y_i = x_i/‖x_i‖, scores a_ij = β_n⟨y_i, y_j⟩ with
β_n = γ log n, and one attention layer

    x_i' = Σ_j A_ij y_j + α x_i,        A_ij = e^{a_ij} / Σ_k e^{a_ik},

whose output is compared with its input by the overlap ⟨y_i', y_j'⟩ of the normalised
outputs. Their Assumption 1 (the simplex): ‖x_i‖² = q and ⟨y_i, y_j⟩ = ρ ∈ (0, 1) for
every i ≠ j (n tokens in d ≥ n dimensions). Their Theorem 2.1, α = 0, n → ∞:

    ⟨y_i', y_j'⟩ → 1 (γ < 1/(1 − ρ)),  4ρ/(1 + 3ρ) (γ = 1/(1 − ρ)),  ρ (γ > 1/(1 − ρ)):

below γ* = 1/(1 − ρ) one layer collapses every token onto one direction; above it the
layer is the identity on directions; at it the tokens still contract, less.

Everything below is exact for the simplex at every n, derived here in two lines (the
theorem's limits are its n → ∞ values; the α = 0 limits are checked against them in the
tests). With y_j = √ρ u + √(1 − ρ) e_j (u, e_1, …, e_n orthonormal) every row of A is the
same up to order: the self-weight a = 1/(1 + (n − 1) e^{−β(1−ρ)}) and b = (1 − a)/(n − 1)
on each other token, so with c = α√q

    x_i' = (1 + c)√ρ u + √(1 − ρ) [(a + c) e_i + b Σ_{j≠i} e_j],

    ⟨y_i', y_j'⟩ = ((1 + c)²ρ + (1 − ρ)(2(a + c)b + (n − 2)b²))
                   / ((1 + c)²ρ + (1 − ρ)((a + c)² + (n − 1)b²)).

With β = γ log n, (n − 1)e^{−β(1−ρ)} ~ n^{1 − γ(1−ρ)}: a → 0, ½, 1 below, at and above γ*,
b → 0 and n b² → 0, so ⟨y_i', y_j'⟩ → (1 + c)²ρ / ((1 + c)²ρ + (1 − ρ)(a∞ + c)²), which is
Theorem 2.1 at c = 0. The approach is slow: a ≈ n^{−|1 − γ(1−ρ)|} (or 1 minus it) away
from γ*, so at n = 4,096 the crossover is still wide (the figure of
experiments/long_context_published.py). Away from the simplex (their Assumption 2,
overlaps in [ρ_1, ρ_2]) the paper gives bounds, not these closed forms.

attndyn's own :func:`critical_gamma` is a different, unpublished criterion: the γ at which
the mean self-weight is ½ for i.i.d. *uniform* tokens on S^{d−1} (overlaps ≈ 0 ± 1/√d,
not a simplex). At the simplex's γ* the self-weight tends to ½ as well, and both tend to 1
for ρ = 0, d → ∞; elsewhere they are different quantities.
"""

import math

import numpy as np

from .._core.errors import ParameterError, check_int, check_real_in

#: Regime names, below, at and above γ* = 1/(1 − ρ) (the paper's words).
REGIMES = ("subcritical", "critical", "supercritical")

#: |γ(1 − ρ) − 1| at most this counts as γ = γ* in the n → ∞ limits: γ* computed in float64
#: and multiplied back by 1 − ρ is within a few ulps of 1.
_AT_THRESHOLD = 8 * np.finfo(np.float64).eps


def _rho(rho, *, open_zero: bool = False) -> float:
    return check_real_in("rho", rho, lower=0.0, upper=1.0, lower_open=open_zero, upper_open=True)


def _gamma(gamma) -> float:
    return check_real_in("gamma", gamma, lower=0.0)


def _n_tokens(n_tokens) -> int | None:
    if n_tokens is not None:
        check_int("n_tokens", n_tokens, lower=2)
    return n_tokens


def simplex_critical_gamma(rho: float | int) -> float:
    """γ* = 1/(1 − ρ): the critical scaling β_n = γ* log n of Chen, Lin, Polyanskiy and
    Rigollet (arXiv:2510.05554, Theorem 2.1) for n tokens of pairwise overlap ρ ∈ [0, 1).
    1 at ρ = 0. Not :func:`critical_gamma` (attndyn's heuristic for uniform tokens)."""
    return 1.0 / (1.0 - _rho(rho))


def long_context_regime(gamma: float | int, rho: float | int) -> str:
    """``"subcritical"``, ``"critical"`` or ``"supercritical"``: γ below, at or above
    γ* = 1/(1 − ρ) (at: within 8 ulps of γ(1 − ρ) = 1)."""
    return _regime(_gamma(gamma), _rho(rho))


def _regime(gamma: float, rho: float) -> str:
    """:func:`long_context_regime` of a checked γ and ρ."""
    excess = gamma * (1.0 - rho) - 1.0
    if abs(excess) <= _AT_THRESHOLD:
        return "critical"
    return "subcritical" if excess < 0 else "supercritical"


def simplex_self_weight(gamma: float | int, rho: float | int, n_tokens: int | None = None) -> float:
    """A_ii, the weight a token gives itself in the simplex (pairwise overlap ρ) with
    β = γ log n: exactly ``1/(1 + (n − 1) n^{−γ(1−ρ)})`` for ``n_tokens = n``, and its
    n → ∞ limit 0, ½ or 1 below, at or above γ* = 1/(1 − ρ) for ``n_tokens=None``
    (arXiv:2510.05554: uniform attention below γ*, the identity above)."""
    gamma, rho, n = _gamma(gamma), _rho(rho), _n_tokens(n_tokens)
    if n is None:
        return _limit_self_weight(gamma, rho)
    return _self_weight(gamma, rho, n)


def _limit_self_weight(gamma: float, rho: float) -> float:
    """:func:`simplex_self_weight`'s n → ∞ limit of a checked γ and ρ."""
    return {"subcritical": 0.0, "critical": 0.5, "supercritical": 1.0}[_regime(gamma, rho)]


def _self_weight(gamma: float, rho: float, n: int) -> float:
    # expit of β(1 − ρ) − log(n − 1): finite at every γ (no e^β is formed).
    return float(1.0 / (1.0 + math.exp(math.log(n - 1) - gamma * math.log(n) * (1.0 - rho))))


def simplex_output_overlap(
    gamma: float | int,
    rho: float | int,
    n_tokens: int | None = None,
    *,
    residual: float | int = 0.0,
    norm_sq: float | int = 1.0,
) -> float:
    """⟨y_i', y_j'⟩ (i ≠ j) after one pre-LN attention layer x_i' = Σ_j A_ij y_j + α x_i
    on the simplex (‖x_i‖² = q, ⟨y_i, y_j⟩ = ρ), β = γ log n: the observable of
    Chen, Lin, Polyanskiy and Rigollet's Theorem 2.1 (arXiv:2510.05554).

    ``n_tokens = n``: the exact value at n (the module's formula). ``n_tokens=None``: its
    n → ∞ limit, for α = 0 the theorem's 1, 4ρ/(1 + 3ρ), ρ below, at and above
    γ* = 1/(1 − ρ); with a residual ``residual`` = α ≥ 0 and ``norm_sq`` = q > 0,
    (1 + c)²ρ/((1 + c)²ρ + (1 − ρ)(a∞ + c)²), c = α√q, a∞ the limiting self-weight
    (derived here). The limit needs ρ > 0 (the theorem's range): at ρ = 0 the common
    direction vanishes and the subcritical limit is no longer 1.
    """
    gamma, rho, n = _gamma(gamma), _rho(rho), _n_tokens(n_tokens)
    alpha = check_real_in("residual", residual, lower=0.0)
    q = check_real_in("norm_sq", norm_sq, lower=0.0, lower_open=True)
    c = alpha * math.sqrt(q)
    common = (1.0 + c) ** 2 * rho  # the shared direction u, kept by every output
    if n is None:
        if rho == 0.0:
            raise ParameterError(
                "rho=0 has no n → ∞ limit of this form (Theorem 2.1 takes rho in (0, 1)); "
                "give n_tokens for the exact value at n."
            )
        a = _limit_self_weight(gamma, rho)
        return common / (common + (1.0 - rho) * (a + c) ** 2)
    a = _self_weight(gamma, rho, n)
    b = (1.0 - a) / (n - 1)
    cross = common + (1.0 - rho) * (2.0 * (a + c) * b + (n - 2) * b * b)
    own = common + (1.0 - rho) * ((a + c) ** 2 + (n - 1) * b * b)
    return cross / own
