"""Seed 003 Fig. 7: clustering fractions against time, d = 4, N = 50, β = 5.

Full value noise (eq. 4; SA). Reduced: 200 trajectories, T = 20, L = 50.
--full: 2,000 trajectories, T = 50, L = 100.
Writes figures/fig7_evolution_<engine>[_full][_x64].{png,json} (--full, --x64).
"""

from _common import evolution_run, figure_stem, parser, write_evolution

import attndyn as ad


def main():
    args = parser(__doc__, x64=True).parse_args()
    n, horizon, depth = (2000, 50.0, 100) if args.full else (200, 20.0, 50)
    points = ad.grid(dim=[4], n_tokens=[50], beta=[5.0])
    stem = figure_stem(f"fig7_evolution_{args.engine}", args)
    ds = evolution_run(
        points, args, stem, n_trajectories=n, depth=depth, horizon=horizon, n_saves=41
    )
    title = "Seed 003 Fig. 7: class fractions against time, Post-LN with Gaussian values"
    write_evolution(
        ds,
        stem,
        title=title,
        label_keys=("beta", "dim", "n_tokens"),
    )


if __name__ == "__main__":
    main()
