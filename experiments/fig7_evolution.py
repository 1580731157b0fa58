"""Seed 003 Fig. 7: clustering fractions against time, d = 4, N = 50, β = 5.

Full value noise (eq. 4; SA), L = 100. Reduced: 200 trajectories, T = 20, L = 50.
--full: 2,000 trajectories, T = 50, L = 100.
"""

import numpy as np
from _common import FIGURES, parser, run, summary

import attndyn as ad


def main():
    args = parser(__doc__).parse_args()
    n, horizon, depth = (2000, 50.0, 100) if args.full else (200, 20.0, 50)
    points = ad.grid(dim=[4], tokens=[50], beta=[5.0])
    save_at = tuple(np.linspace(0, horizon, 41).tolist())
    ds = run(
        points,
        n_trajectories=n,
        seed=args.seed,
        save_at=save_at,
        engine=args.engine,
        attention="softmax",
        depth=depth,
        horizon=horizon,
        dt=0.01,
    )
    FIGURES.mkdir(exist_ok=True)
    stem = f"fig7_evolution_{args.engine}"
    title = "Seed 003 Fig. 7: 50 tokens leave the unclustered start and end in two antipodal groups"
    ad.plot.evolution(ds, label_keys=("beta", "dim", "tokens"), title=title).savefig(
        FIGURES / f"{stem}.png", dpi=130
    )
    summary(ds, FIGURES / f"{stem}.json")


if __name__ == "__main__":
    main()
