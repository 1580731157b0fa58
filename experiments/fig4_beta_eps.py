"""Seed 003 Fig. 4: the hybrid model's (β, ε) phase diagram with ε_c(β) = √(2e^{−β}).

Discrete eq. 7 (or the SDE eq. 8 with --engine sde), N = 2, d = 3, unnormalised attention
(Prop. 1 is stated for it), L = 100. Reduced: a 9 x 8 grid, 200 trajectories, T = 20.
--full: β ∈ [0, 4] step 0.25, ε ∈ [0.1, 2] step 0.1, 1000 trajectories, T = 50.
"""

import numpy as np
from _common import FIGURES, parser, run, summary

import attndyn as ad


def main():
    args = parser(__doc__).parse_args()
    if args.full:
        betas, epss, n, horizon = np.arange(0, 4.01, 0.25), np.arange(0.1, 2.01, 0.1), 1000, 50.0
    else:
        betas, epss, n, horizon = np.linspace(0, 4, 9), np.linspace(0.25, 2, 8), 200, 20.0
    points = ad.grid(
        model=["hybrid"],
        dim=[3],
        tokens=[2],
        eps=[round(float(e), 4) for e in epss],
        beta=[round(float(b), 4) for b in betas],
    )
    ds = run(
        points,
        n_trajectories=n,
        seed=args.seed,
        engine=args.engine,
        attention="unnormalized",
        depth=100,
        horizon=horizon,
        dt=0.01,
    )
    FIGURES.mkdir(exist_ok=True)
    stem = f"fig4_beta_eps_{args.engine}"
    ad.plot.beta_eps(ds).savefig(FIGURES / f"{stem}.png", dpi=130)
    summary(ds, FIGURES / f"{stem}.json")


if __name__ == "__main__":
    main()
