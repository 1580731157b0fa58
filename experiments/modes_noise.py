"""Many tokens: does value noise shorten the metastable plateau? (spec §7)

N = 512 tokens uniform on S¹, softmax, β = 9 (ℓ* = 4), Post-LN layer maps, L = 100, run
to T = 60 with the flow's values V = I/L plus seed 003's noise: matrix noise σ M_n/√L
(σ = 0, 0.1, 0.3, 1) and scalar noise ε v_n/√L · I (eq. 7; ε = 0, 0.1, 0.3). The plateau is
the multi-cluster state, from the time the tokens have gathered into clusters until at
most two are left (one, or an antipodal pair: the end states of the noisy dynamics).
First, without noise, β = 4, 9, 16 (ℓ* = 3, 4, 6): the clusters the tokens gather into
against ℓ*. Reduced: 16 trajectories a level (8 a β without noise). --full: 64, T = 120.

Writes figures/modes_plateau[_full].{png,json} and
figures/modes_noise_{matrix,scalar}[_full].{png,json} (and each .nc, not committed): per
point the plateau's cluster count and lifetime (mean ± SE, cut at the horizon), how many
trajectories it ended in, and the clusters at the horizon.
"""

import json

from _common import FIGURES, figure_stem, parser

import attndyn as ad
from attndyn.studies import ModesRun, ModesSpec, modes_points, modes_study, modes_summary

LEVELS = {"matrix": [0.0, 0.1, 0.3, 1.0], "scalar": [0.0, 0.1, 0.3]}


def main():
    args = parser(__doc__).parse_args()
    if args.engine != "discrete":
        raise SystemExit("modes_noise runs the layer maps (--engine discrete).")
    n, horizon = (64, 120.0) if args.full else (16, 60.0)
    saves = int(2 * horizon) + 1
    spec = ModesSpec(horizon=horizon, saves=saves, depth=100)
    run = ModesRun(n_trajectories=max(2, n // 2), seed=args.seed, ell_max=8)
    ds = modes_study(spec, run, modes_points(dims=[2], n_tokens=[512], betas=[4.0, 9.0, 16.0]))
    stem = figure_stem("modes_plateau", args)
    ds.to_netcdf(FIGURES / f"{stem}.nc")  # the data behind the figure (not committed)
    ad.plot.modes(ds).savefig(FIGURES / f"{stem}.png", dpi=130)
    records = modes_summary(ds)
    (FIGURES / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
    for r in records:
        print(f"beta {r['beta']:g}: l* = {r['ell_star']}, plateau {r['plateau_clusters']}")
    for noise, levels in LEVELS.items():
        spec = ModesSpec(horizon=horizon, saves=saves, depth=100, noise=noise)
        run = ModesRun(n_trajectories=n, seed=args.seed, ell_max=8)
        points = modes_points(
            dims=[2], n_tokens=[512], betas=[9.0], levels=levels, level_name=spec.level_name
        )
        ds = modes_study(spec, run, points, progress=True)
        stem = figure_stem(f"modes_noise_{noise}", args)
        ds.to_netcdf(FIGURES / f"{stem}.nc")  # the data behind the figure (not committed)
        ad.plot.modes(ds).savefig(FIGURES / f"{stem}.png", dpi=130)
        records = modes_summary(ds)
        (FIGURES / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
        for r in records:
            level = r.get("eps", r.get("sigma"))
            life, se = r["plateau_lifetime"]
            print(
                f"{noise} {level:g}: plateau {life:.1f} ± {se:.1f} "
                f"({r['n_plateau_ended']}/{r['n_plateau']} ended), "
                f"{r['plateau_clusters'][0]:.2f} clusters"
            )


if __name__ == "__main__":
    main()
