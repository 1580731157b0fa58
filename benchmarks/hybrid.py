"""W4: seed 003's Fig. 4 at the paper's scale, as the user runs it.

The whole process of ``experiments/fig4_beta_eps.py --full`` (import, compile, 680 points ×
1,000 trajectories × 5,000 layers or SDE steps, dataset and figure written), timed from the
outside, beside a plain NumPy implementation of the same model run in this process on one
point (N × d float64 coordinates, 1,000 trajectories, 500 layers: the user's alternative)
and scaled to the grid. Labelled ``whole_process``; the NumPy figure is steady state.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GRID_POINTS = 17 * 40
TRAJECTORIES = 1000
STEPS = 5000  # L = 100, T = 50 (or dt = 0.01, T = 50)


def numpy_hybrid_rate(n: int = 1000, layers: int = 500, beta: float = 2.0, eps: float = 0.5):
    """Trajectory-steps per second of 003 eq. 7 (USA, N = 2, d = 3, Rademacher v_n) in NumPy."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 2, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    depth = 100
    start = time.perf_counter()
    for _ in range(layers):
        weights = np.exp(beta * np.einsum("bik,bjk->bij", x, x)) / 2
        attention = np.einsum("bij,bjk->bik", weights, x)
        v = rng.choice([-1.0, 1.0], size=(n, 1, 1))
        y = x + (1 / depth + eps * v / np.sqrt(depth)) * attention
        x = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return n * layers / (time.perf_counter() - start)


def numpy_overlap_rate(n: int = 1000, steps: int = 500, beta: float = 2.0, eps: float = 0.5):
    """Steps per second of the hybrid SDE (eq. 8, N = 2, d = 3) by Euler–Maruyama in NumPy."""
    rng = np.random.default_rng(0)
    y = rng.standard_normal((n, 2, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    dt = 0.01
    start = time.perf_counter()
    for _ in range(steps):
        a = np.einsum("bij,bjk->bik", np.exp(beta * np.einsum("bik,bjk->bij", y, y)) / 2, y)
        xy = np.sum(y * a, axis=-1, keepdims=True)
        tangent = a - xy * y
        correction = 1.5 * xy**2 * y - 0.5 * np.sum(a * a, -1, keepdims=True) * y - xy * a
        db = rng.standard_normal((n, 1, 1)) * np.sqrt(dt)
        y = y + (eps**2 * correction + tangent) * dt + eps * tangent * db
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
    return n * steps / (time.perf_counter() - start)


def bench_w4(engine: str, attention: str = "unnormalized") -> dict:
    command = [
        sys.executable,
        str(ROOT / "experiments" / "fig4_beta_eps.py"),
        "--full",
        "--engine",
        engine,
        "--attention",
        attention,
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    stem = f"fig4_beta_eps_{engine}_{attention}_full"
    record = json.loads((ROOT / "figures" / f"{stem}.json").read_text())
    numpy = numpy_hybrid_rate() if engine == "discrete" else numpy_overlap_rate()
    total = GRID_POINTS * TRAJECTORIES * STEPS
    return {
        "workload": f"W4-{engine}-{attention}",
        "whole_process_s": seconds,
        "study_s": record["seconds"],
        "traj_steps_per_s_whole_process": total / seconds,
        "numpy_traj_steps_per_s": numpy,
        "numpy_projected_s": total / numpy,
        "speedup_whole_process": (total / seconds) / numpy,
        "simulated": sorted(set(record["provenance"]["simulated"])),
        "target": "under 600 s on this 2-core CPU",
    }
