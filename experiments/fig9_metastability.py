"""Seed 003 Fig. 9 (App. D.2): stochastic vs deterministic dynamics, N = 50, d = 4, SA.

Stochastic: full Gaussian value noise (eq. 4; 003 does not say which stochastic model,
we use the one of Figs. 3/6/7); deterministic: eq. 7 with ε = 0. β = 0.5 (T = 15) and
β = 4.5 (T = 30), L = 100. At large β the deterministic flow lingers in metastable
multi-cluster states (unclustered for a long time), the stochastic one clusters fast.
Reduced: 100 trajectories, L = 50. --full: 2,000 trajectories, L = 100.
Writes figures/fig9_metastability_beta{0.5,4.5}_<engine>[_full][_x64].{png,json} (--full, --x64).
"""

from _common import evolution_run, figure_stem, parser, write_evolution


def main():
    args = parser(__doc__, x64=True).parse_args()
    n, depth = (2000, 100) if args.full else (100, 50)
    for beta, horizon in ((0.5, 15.0), (4.5, 30.0)):
        points = [
            {"model": m, "dim": 4, "n_tokens": 50, "beta": beta} for m in ("full", "deterministic")
        ]
        stem = figure_stem(f"fig9_metastability_beta{beta:g}_{args.engine}", args)
        ds = evolution_run(
            points, args, stem, n_trajectories=n, depth=depth, horizon=horizon, n_saves=31
        )
        title = "Seed 003 Fig. 9: stochastic (full) and deterministic values"
        write_evolution(ds, stem, title=title, label_keys=("model", "beta"))


if __name__ == "__main__":
    main()
