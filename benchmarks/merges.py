"""What ``on_merged="auto"`` costs where every trajectory merges: the same study with
``"count"`` (the arithmetic as it ran) and with ``"auto"`` (each merge bounded on the host
from the saved states, float64 reruns where a bound is weak), in one process, steady state
(each measured after a first run that compiles), alternating so that a loaded machine
slows both alike.

Usage: ``python benchmarks/merges.py [--repeats 2] [--json]``. Workloads: W2 of
``benchmarks/run.py`` (32 tokens, d = 16, 512 trajectories, T = 10, one save: 506 merge)
and Fig. 7's shape at reduced scale (50 tokens, d = 4, β = 5, 256 trajectories, T = 20,
11 saves: every trajectory merges by t ≈ 15).
"""

import argparse
import json
import os
import time
from typing import Literal

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={os.cpu_count() or 1}"
    ).strip()

import jax
import numpy as np

import attndyn as ad

WORKLOADS = {
    "W2": dict(n_tokens=32, dim=16, beta=1.0, horizon=10.0, saves=None, n=512),
    "fig7-small": dict(n_tokens=50, dim=4, beta=5.0, horizon=20.0, saves=11, n=256),
}


def study(w: dict, on_merged: Literal["auto", "count"]):
    saves = None if w["saves"] is None else tuple(np.linspace(0, w["horizon"], w["saves"]))

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(beta), depth=100, saveat=ad.SaveAt(w["horizon"], saves)
        )

    point = [{"dim": w["dim"], "n_tokens": w["n_tokens"], "beta": w["beta"]}]
    started = time.perf_counter()
    ds = ad.estimate_probabilities(
        make, point, key=jax.random.key(0), n_trajectories=w["n"], progress=False,
        on_merged=on_merged,
    )  # fmt: skip
    return time.perf_counter() - started, ds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for name, w in WORKLOADS.items():
        for policy in ("count", "auto"):
            study(w, policy)  # compile
        seconds = {"count": [], "auto": []}
        ds = None
        for _ in range(max(1, args.repeats)):
            for policy in ("count", "auto"):
                elapsed, ds = study(w, policy)
                seconds[policy].append(elapsed)
        assert ds is not None  # the last "auto" run's dataset
        best = {k: min(v) for k, v in seconds.items()}
        record = {
            "workload": name,
            "count_s": best["count"],
            "auto_s": best["auto"],
            "ratio": best["auto"] / best["count"],
            "n_merged": int(ds["n_merged"].values.max()),
            "n_rerun": int(ds["n_rerun"].values.sum()),
            "merge_bound": float(np.nanmax(ds["merge_bound"].values)),
            "device": str(jax.devices()[0].device_kind),
        }
        print(json.dumps(record) if args.json else record, flush=True)


if __name__ == "__main__":
    main()
