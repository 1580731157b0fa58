"""How the tile sizes move the two-token chain on an accelerator (benchmarks/README.md, "GPU").

Patches the estimator's tile constants (``runner.ACCELERATOR_TILE``, ``runner.TILE_SPREAD``
and the early-absorption compaction tile) before anything runs, then times ``run.py``'s
W3, W1's point at a larger trajectory count, or seed 003's Fig. 3 script. A probe for
choosing those constants, not a user's tool::

    python benchmarks/tile_probe.py W3 --tile 65536 --spread 1 [--points 17]
    python benchmarks/tile_probe.py W1 --tile 131072 --n 262144
    python benchmarks/tile_probe.py fig3 --absorb-tile 8192 --out OUT.png
"""

import argparse
import json
import runpy
import sys
import time
from pathlib import Path

from attndyn._estimate import runner
from attndyn._models.reduced import absorption

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["W1", "W3", "fig3"])
    parser.add_argument("--tile", type=int, default=runner.ACCELERATOR_TILE)
    parser.add_argument("--spread", type=int, default=runner.TILE_SPREAD)
    parser.add_argument("--absorb-tile", type=int, default=absorption.ACCELERATOR_ABSORB_TILE)
    parser.add_argument("--points", type=int, default=17)
    parser.add_argument("--n", type=int, default=262144)
    parser.add_argument("--out", default="/tmp/fig3_probe.png")
    args = parser.parse_args()
    runner.ACCELERATOR_TILE, runner.TILE_SPREAD = args.tile, args.spread
    absorption.ACCELERATOR_ABSORB_TILE = args.absorb_tile
    sys.path.insert(0, str(HERE))
    import run  # benchmarks/run.py, imported after the patch

    start = time.perf_counter()
    if args.what == "W3":
        result = run.bench_w3("auto", args.points)
    elif args.what == "W1":
        w = run.WORKLOADS["W1"]
        run.run_engine(w, "auto", n=args.n)
        seconds, _ = run.run_engine(w, "auto", n=args.n)
        steps = args.n * round(w["depth"] * w["horizon"])
        result = {"workload": f"W1 n={args.n}", "traj_steps_per_s": steps / seconds}
    else:
        sys.argv = ["fig3_beta_d.py", "--full", "--out", args.out]
        runpy.run_path(str(HERE.parent / "experiments" / "fig3_beta_d.py"), run_name="__main__")
        result = {"workload": "fig3 --full"}
    result |= {
        "tile": args.tile,
        "spread": args.spread,
        "absorb_tile": args.absorb_tile,
        "wall_s": time.perf_counter() - start,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
