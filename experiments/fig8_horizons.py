"""Seed 003 Fig. 8 (App. D.1): fractions against time for N = 2 and three β regimes.

Settings of Fig. 3 (eq. 4, SA, σ = 1, L = 100) except the horizon (T = 50 and 100).
The three β are not stated in 003; we take β = 0.25 (below β_c(d) for every d: single
cluster only), β = 3 (above β_c(d) for every d ≤ 10: antipodal attainable for all d) and
β = 1 (β_c(4) = 0.66 < 1 < β_c(6) = 1.03: antipodal only for some d).
Reduced: d ∈ {4, 6}, 200 trajectories, T = 50, L = 50. --full: d ∈ {4, ..., 10},
2,000 trajectories, T = 100, L = 100.
Writes figures/fig8_horizons_<engine>[_full][_x64].{png,json} (--full, --x64).
"""

from _common import evolution_run, figure_stem, parser, write_evolution

import attndyn as ad


def main():
    args = parser(__doc__, x64=True).parse_args()
    if args.full:
        dims, n, horizon, depth = list(range(4, 11)), 2000, 100.0, 100
    else:
        dims, n, horizon, depth = [4, 6], 200, 50.0, 50
    points = ad.grid(dim=dims, n_tokens=[2], beta=[0.25, 3.0, 1.0])
    stem = figure_stem(f"fig8_horizons_{args.engine}", args)
    ds = evolution_run(
        points, args, stem, n_trajectories=n, depth=depth, horizon=horizon, n_saves=26
    )
    title = (
        "Seed 003 Fig. 8: class fractions of two tokens against time (β_c(4) = 0.66, β_c(6) = 1.03)"
    )
    write_evolution(
        ds,
        stem,
        title=title,
        label_keys=("dim", "beta"),
        dpi=110,
        ncols=3,  # one row per d, one column per β
    )


if __name__ == "__main__":
    main()
