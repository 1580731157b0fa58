"""An independent plain-NumPy simulation of 003 eq. 4 (Post-LN, Gaussian value matrices).

Written from the spec alone (§1, §2), in float64 and with NumPy's own generator, so that
agreement with attndyn shares neither arithmetic nor random numbers nor code.
"""

import numpy as np


def softmax_attention(theta: np.ndarray, beta: float) -> np.ndarray:
    """A_i = Σ_j softmax_j(β⟨θ_i, θ_j⟩) θ_j for a batch ``(B, N, d)``."""
    scores = beta * np.einsum("bik,bjk->bij", theta, theta)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bij,bjk->bik", weights, theta)


def post_ln_gaussian(
    n_trajectories: int,
    n_tokens: int,
    dim: int,
    beta: float,
    *,
    depth: int,
    horizon: float,
    sigma: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """Terminal states ``(B, N, d)``: x_i ← normalize(x_i + (σ/√L) M_n A_i), M_n i.i.d. N(0, 1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_trajectories, n_tokens, dim))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    scale = sigma / np.sqrt(depth)
    for _ in range(round(depth * horizon)):
        m = rng.standard_normal((n_trajectories, dim, dim))
        y = x + scale * np.einsum("bik,blk->bil", softmax_attention(x, beta), m)
        x = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return x


def classes(x: np.ndarray, tol: float = 1e-3) -> np.ndarray:
    """(single, antipodal) per trajectory, as spec §5 defines them."""
    gram = np.einsum("bik,bjk->bij", x, x)
    i, j = np.triu_indices(x.shape[1], 1)
    pairs = gram[:, i, j]
    together = pairs >= 1 - tol
    apart = pairs <= -1 + tol
    single = together.all(axis=1)
    antipodal = (together | apart).all(axis=1) & apart.any(axis=1)
    return np.stack([single, antipodal], axis=1)
