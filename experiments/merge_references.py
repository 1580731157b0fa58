"""Independent references for the five studies of issue 28, where float32 merged tokens.

Each is a plain NumPy loop of the N × d model in float64 (tests/numpy_reference.py: 003
eq. 4 written from the spec alone, with NumPy's own generator; here also its centred
LayerNorm variant), at the study's own L and T, with more trajectories than the study; and,
for two tokens, the exact t = ∞ probability of the scale function (a check of the
reference, not of the study: finite T and L move the answer). Compare with:

    attndyn phase-diagram --beta 1 --dim 2 --n-tokens 2 --n-trajectories 20000 --depth 100 \
        --horizon 20 --seed 9 [--x64]
    attndyn phase-diagram --beta 3 --dim 4 --n-tokens 3 --n-trajectories 8000 --depth 100 \
        --horizon 20 --seed 55
    attndyn phase-diagram --beta 1,3 --dim 4 --n-trajectories 1000 --depth 50 --horizon 20 \
        --route full
    attndyn phase-diagram --norm layernorm --beta 3 --dim 5 --n-tokens 2 --n-trajectories 2000 \
        --depth 100 --horizon 20

About 3 minutes on a 2-core CPU.

    python experiments/merge_references.py [--n-trajectories-scale 1.0]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import attndyn as ad
from tests.numpy_reference import softmax_attention


def unit(y: np.ndarray) -> np.ndarray:
    """Rows normalised."""
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def centred(y: np.ndarray) -> np.ndarray:
    """Rows centred (mean of the coordinates removed) and normalised."""
    y = y - y.mean(axis=-1, keepdims=True)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def simulate(n, n_tokens, dim, beta, *, depth, horizon, norm="rms", seed=0, tol=1e-3):
    """(single, antipodal, has an antipodal pair) fractions at T of Post-LN with Gaussian
    value matrices (σ = 1), float64, uniform starts; in batches to bound memory."""
    rng = np.random.default_rng(seed)
    normalise = centred if norm == "layernorm" else None
    counts = np.zeros(3)
    for size in [min(4000, n - i) for i in range(0, n, 4000)]:
        x = rng.standard_normal((size, n_tokens, dim))
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        if normalise is not None:
            x = normalise(x)  # the first layer's LayerNorm
        for _ in range(round(depth * horizon)):
            m = rng.standard_normal((size, dim, dim))
            y = x + np.einsum("bik,blk->bil", softmax_attention(x, beta), m) / np.sqrt(depth)
            x = normalise(y) if normalise is not None else unit(y)
        gram = np.einsum("bik,bjk->bij", x, x)
        i, j = np.triu_indices(n_tokens, 1)
        together, apart = gram[:, i, j] >= 1 - tol, gram[:, i, j] <= -1 + tol
        single = together.all(axis=1)
        antipodal = (together | apart).all(axis=1) & apart.any(axis=1)
        counts += [single.sum(), antipodal.sum(), apart.any(axis=1).sum()]
    p = counts / n
    return {
        name: [float(v), float(np.sqrt(v * (1 - v) / n))]
        for name, v in zip(("single", "antipodal", "has_antipodal_pair"), p)
    }


STUDIES = [
    ("d = 2 (both ±1 attract)", dict(n_tokens=2, dim=2, beta=1.0, depth=100, horizon=20.0), 40000),
    ("N = 3, d = 4", dict(n_tokens=3, dim=4, beta=3.0, depth=100, horizon=20.0), 16000),
    ("N = 2, d = 4, β = 1", dict(n_tokens=2, dim=4, beta=1.0, depth=50, horizon=20.0), 16000),
    ("N = 2, d = 4, β = 3", dict(n_tokens=2, dim=4, beta=3.0, depth=50, horizon=20.0), 16000),
    (
        "LayerNorm, d = 5",
        dict(n_tokens=2, dim=5, beta=3.0, depth=100, horizon=20.0, norm="layernorm"),
        16000,
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n-trajectories-scale", type=float, default=1.0)
    parser.add_argument("--out", default="figures/merge_references.json")
    args = parser.parse_args()
    rows = []
    for i, (name, kwargs, n) in enumerate(STUDIES):
        started = time.perf_counter()
        n = max(1, round(n * args.n_trajectories_scale))
        row = {"study": name, **kwargs, "trajectories": n}
        row.update(simulate(n, seed=100 + i, **kwargs))
        if kwargs["n_tokens"] == 2:
            row["exact_t_infinity"] = ad.theory.p_antipodal_uniform(
                kwargs["beta"], kwargs["dim"], kwargs.get("norm", "rms")
            )
        row["seconds"] = round(time.perf_counter() - started, 1)
        print(row, flush=True)
        rows.append(row)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
