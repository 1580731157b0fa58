"""What the blocks of device work cost, and how fast Ctrl-C stops a run (issue 29).

    python benchmarks/blocks.py [--route auto|full] [--n-trajectories N] [--depth L]
                                [--horizon T] [--stop-after SECONDS]

Runs one point of W1 (N = 2, d = 4, β = 3, Post-LN, Gaussian values σ = 1) twice in this
process, steady state (compiled once before): with the estimator's blocks (about 0.5 s of
device work each, a host check between them) and with one block per tile (the layers of a
tile in one call, as before the blocks). Prints one JSON line: the seconds of each, their
ratio, and whether every tally is bit for bit the same. With ``--stop-after S`` it then
starts the audit's deep CLI command (depth 10⁶, full route) in a subprocess, sends SIGINT
after S seconds and reports the seconds until the process exited (status 130 expected).

On a GPU machine run it as ``python benchmarks/blocks.py --n-trajectories 131072`` (one
accelerator tile) and ``--route full``; the CPU numbers are in the safety guide.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np

import attndyn as ad
from attndyn._estimate import runner

TALLIES = ("count", "n_valid", "n_nonfinite", "n_merged", "mean_cosine", "pair_density")


def study(args):
    def model_fn(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(beta),
            ad.MatrixValues(1.0),
            depth=args.depth,
            saveat=ad.SaveAt(args.horizon),
        )

    return ad.estimate_probabilities(
        model_fn,
        [{"dim": 4, "n_tokens": 2, "beta": 3.0}],
        key=jax.random.key(0),
        n_trajectories=args.n_trajectories,
        route=args.route,
        progress=False,
        on_merged="count",
    )


def timed(args, block_seconds: float):
    runner.BLOCK_SECONDS = block_seconds
    runner.FIRST_BLOCK = 64 if np.isfinite(block_seconds) else 2**31 - 1
    study(args)  # compiled (and the block size learnt) before timing
    started = time.perf_counter()
    ds = study(args)
    return time.perf_counter() - started, ds


def stop_time(delay: float) -> tuple[int, float]:
    command = [sys.executable, "-c", "from attndyn.cli import main; main()", "phase-diagram"]
    command += ["--dim", "4", "--beta", "1", "--n-trajectories", "64", "--depth", "1000000"]
    command += ["--horizon", "10", "--route", "full", "--early-absorption", "off"]
    command += ["--no-progress", "--out", f"/tmp/attndyn-blocks-{os.getpid()}", "--fresh"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait()
    return process.returncode, time.monotonic() - sent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--route", default="auto", choices=["auto", "full"])
    parser.add_argument("--n-trajectories", type=int, default=4000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--horizon", type=float, default=20.0)
    parser.add_argument("--stop-after", type=float, default=None)
    args = parser.parse_args()
    blocked, a = timed(args, 0.5)
    whole, b = timed(args, float("inf"))
    same = all(np.array_equal(a[name].values, b[name].values) for name in TALLIES)
    record = {
        "route": args.route,
        "trajectories": args.n_trajectories,
        "layers": round(args.depth * args.horizon),
        "blocked_s": round(blocked, 3),
        "one_block_s": round(whole, 3),
        "ratio": round(blocked / whole, 3),
        "bit_identical": same,
        "device": str(jax.devices()[0]),
    }
    if args.stop_after is not None:
        record["stop_status"], seconds = stop_time(args.stop_after)
        record["stop_seconds"] = round(seconds, 2)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
