"""How long a modes study takes, roughly, and how its layers are cut into blocks for Ctrl-C.

The estimate is in seconds on the 2-core development CPU. A layer's attention costs what
its route costs: with direct attention (dense, or in blocks of rows) N² d *pair
operations* (one token pair in one coordinate) at :data:`CPU_PAIR_RATE`; on the spectral
route (Q = K = I on S¹ and S², :mod:`attndyn._core.spectral`) its own cost model,
:func:`attndyn._core.spectral.spectral_cost`. A save's observables do a few N² d (the
interaction energy and, for d ≥ 3, the minimum distance and every round of the clusters'
label propagation; the Gegenbauer pair sums of the mode powers for d ≥ 4). An accelerator
is faster: the CPU's time is an upper guess there.
"""

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._core import many_tokens, spectral
from .._models.base import AbstractModel

#: Seconds of device work between two checks for Ctrl-C (the estimator's blocks are sized
#: alike): the layers of a tile run in blocks of about this long.
BLOCK_SECONDS = 0.5
#: Pair operations a second on a 2-core CPU, a Post-LN softmax layer with direct attention:
#: measured 0.35-0.97·10⁹/s at N = 4,096 (dense) and 16,384 (blocks), d = 2, 3 and 4, one
#: trajectory a call, on a 2-core machine shared with other jobs (load ~4; 2026-11-29); the
#: default study's 442 s of CPU time for its ~1.1·10¹² (issue 42) is ~2.4·10⁹ a
#: core-second. A round 10⁹: the times it gives are upper guesses on a quiet machine.
CPU_PAIR_RATE = 1.0e9
#: Runs estimated above this many seconds are announced, one line, before they start (the
#: default study, 3 points of 8 trajectories of 4,096 tokens, is estimated at ~18 min).
WARN_SECONDS = 3600.0
#: Rounds of label propagation a save's clusters take, counted for the estimate (each
#: round is one pass over the pairs): a save's observables at N = 16,384, d = 3, from the
#: uniform start took 1.4 s against 1.0 s for a layer (measured as above).
CLUSTER_ROUNDS = 2
#: Attention evaluations per step of each SDE solver (drift and diffusion each evaluate
#: attention; the Stratonovich solvers add the correction's derivative and a second
#: stage). A rough count, used only for the estimate.
SDE_EVALUATIONS = {"euler": 2, "heun": 6, "spark": 9}


def attention_seconds(model: AbstractModel, n_tokens: int, dim: int, dtype) -> float:
    """Seconds of one attention of one trajectory on its route: the spectral route's cost
    model where ``auto`` (or the user) takes it at this β, else N² d pair operations."""
    attention = getattr(model, "attention", None)
    if attention is not None:
        route = attention.implementation_for(n_tokens, dtype, dim=dim)
        degree = attention.spectral_degree(n_tokens, dtype, dim=dim)
        if route == "spectral" and degree is not None:
            return spectral.spectral_cost(n_tokens, dim, degree)
    return float(n_tokens) * float(n_tokens) * dim / CPU_PAIR_RATE


#: Seconds per token of one save's observables on S² above ``many_tokens.GRID_TOKENS``
#: (energy from harmonics, clusters from grid cells, minimum distance from a k-d tree):
#: 4.5 s for a save of 10⁶ tokens (clusters 0.9 s, minimum distance 1.9 s), measured
#: 2026-11-29 on the 2-core development CPU.
SPHERE_SAVE_SECONDS_PER_TOKEN = 4.5e-6


def observe_seconds(n_tokens: int, dim: int, ell_max: int) -> float:
    """Seconds of one save's observables of one trajectory (see the module docstring; on
    S¹ the clusters, the minimum distance and the mode powers need no pairs, on S² the
    mode powers need none, and above ``GRID_TOKENS`` nothing does)."""
    if dim == 3 and n_tokens > max(many_tokens.GRID_TOKENS, many_tokens.SPECTRAL_ENERGY_TOKENS):
        return float(n_tokens) * SPHERE_SAVE_SECONDS_PER_TOKEN
    pairs = float(n_tokens) * float(n_tokens)
    work = pairs * dim  # the interaction energy over the pairs
    if dim == 2 and n_tokens > many_tokens.SPECTRAL_ENERGY_TOKENS:  # its Fourier form
        work = float(n_tokens) * 2 * (spectral.DEGREES[-1] + 1) * dim
    if dim >= 3:
        work += pairs * dim * (1 + CLUSTER_ROUNDS)
    if dim >= 4:
        work += pairs * (ell_max + 1)
    return work / CPU_PAIR_RATE


def model_steps(model: AbstractModel) -> int:
    """Attention evaluations of one trajectory: the layers of a discrete model, the steps
    of an SDE times its solver's evaluations per step."""
    steps = int(model.stepping()[0])
    if steps:
        return steps
    n_steps = getattr(model, "n_steps", 1)
    integrator = getattr(model, "integrator", None)
    solver = type(getattr(integrator, "solver", None)).__name__.lower()
    per_step = next((n for name, n in SDE_EVALUATIONS.items() if name in solver), 2)
    return int(n_steps) * per_step


def study_seconds(
    models: Sequence[AbstractModel],
    points: Sequence[Mapping[str, Any]],
    *,
    n_run: Sequence[int],
    n_saves: int,
    ell_max: int,
    dtype,
) -> float:
    """Estimated seconds of the whole study on the 2-core CPU (``n_run``: the trajectories
    each point still simulates, whole tiles)."""
    total = 0.0
    for model, point, n in zip(models, points, n_run, strict=True):
        tokens, dim = int(point["n_tokens"]), int(point["dim"])
        per_trajectory = model_steps(model) * attention_seconds(model, tokens, dim, dtype)
        per_trajectory += n_saves * observe_seconds(tokens, dim, ell_max)
        total += n * per_trajectory
    return total


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{seconds:.3g} s"


def cost_warning(seconds: float, largest: Mapping[str, Any]) -> str | None:
    """One line announcing a run estimated above :data:`WARN_SECONDS` on a 2-core CPU
    (``largest``: its largest point), or ``None``."""
    if seconds <= WARN_SECONDS:
        return None
    return (
        f"this modes run is estimated at {_duration(seconds)} on a 2-core CPU (largest "
        f"point {dict(largest)}; direct attention costs N² d per layer and trajectory, "
        f"measured {CPU_PAIR_RATE:.2g}/s there; an accelerator is faster). Ctrl-C stops it "
        "and a rerun resumes; fewer tokens, layers (--horizon, --depth) or trajectories "
        "make it shorter."
    )


class CostWarning(UserWarning):
    """A run estimated long (:func:`cost_warning`). A ``UserWarning``, so that Python's
    default filters show it (they hide ``ResourceWarning``)."""


def warn_cost(seconds: float, largest: Mapping[str, Any]) -> None:
    message = cost_warning(seconds, largest)
    if message is not None:
        warnings.warn(message, CostWarning, stacklevel=3)


def first_block(layer_seconds: float) -> int:
    """Layers in a point's first block: about :data:`BLOCK_SECONDS` (``layer_seconds``: the
    estimated seconds of one layer of a tile), at least one."""
    return int(max(1, min(1 << 30, math.floor(BLOCK_SECONDS / max(layer_seconds, 1e-9)))))


def saves_per_call(save_seconds: float, n_saves: int) -> int:
    """How many saves one call observes (``save_seconds``: the estimated seconds of one
    save's observables of a whole tile): as many as fit in :data:`BLOCK_SECONDS`, at least
    one. Fixed by the point (its N, d, ℓ_max, tile and save count), never by a
    measurement, so the observables' numbers never depend on the machine's speed; small
    studies then take one call a tile, not one a save (121 calls a tile cost a second of
    dispatch at N = 64)."""
    return int(max(1, min(n_saves, math.floor(BLOCK_SECONDS / max(save_seconds, 1e-12)))))


class LayerBlocks:
    """How many layers the next block of a tile runs: about :data:`BLOCK_SECONDS` of device
    work, from the seconds the blocks before took (each block at most 8 times the one
    before; the first from the estimate, :func:`first_block`). The blocks never change a
    number: every block runs the same compiled program, and layer n is computed from the
    state after layer n − 1, its index and the keys alone."""

    def __init__(self, first: int):
        self.size = max(1, int(first))

    def next_stop(self, done: int, steps: int) -> int:
        return min(steps, done + self.size)

    def measured(self, ran: int, seconds: float) -> None:
        wanted = ran * BLOCK_SECONDS / max(seconds, 1e-4)
        self.size = max(1, int(min(wanted, 8 * max(ran, self.size))))


class FixedBlocks(LayerBlocks):
    """Blocks of exactly ``size`` layers (tests: the numbers of every block size agree)."""

    def measured(self, ran: int, seconds: float) -> None:
        del ran, seconds
