"""Many tokens: the mode growth rates of the uniform state against the theory (spec §7).

N = 4,096 tokens i.i.d. uniform on S^{d−1}, d = 2 and 3, softmax attention with
Q = K = V = I, Post-LN layer maps with V = I/L, L = 100, β = 4, 9, 16. Each degree's mode
power P_ℓ is fitted over the linear window (attndyn.studies.modes) and set beside
2λ_ℓ, the growth rate of the linearised mean-field equation for these layer maps
(attndyn.theory.mode_growth_rate with depth = L and N). Reduced: 12 trajectories a point,
T = 3 (61 saves). --full: 32 trajectories, T = 8 (161 saves: the clusters too).

Writes figures/modes_growth[_full].{png,json} (and .nc, not committed); the JSON lists, per
point and degree in its linear window, the fitted rate, its standard error, 2λ_ℓ and the
deviation in standard errors.
"""

import json

from _common import FIGURES, figure_stem, parser

import attndyn as ad
from attndyn.studies import ModesRun, ModesSpec, modes_points, modes_study, modes_summary


def main():
    args = parser(__doc__).parse_args()
    if args.engine != "discrete":
        raise SystemExit("modes_growth runs the layer maps (--engine discrete).")
    n, horizon, saves = (32, 8.0, 161) if args.full else (12, 3.0, 61)
    spec = ModesSpec(horizon=horizon, saves=saves, depth=100)
    run = ModesRun(n_trajectories=n, seed=args.seed, ell_max=12)
    points = modes_points(dims=[2, 3], n_tokens=[4096], betas=[4.0, 9.0, 16.0])
    ds = modes_study(spec, run, points, progress=True)
    stem = figure_stem("modes_growth", args)
    ds.to_netcdf(FIGURES / f"{stem}.nc")
    fig = ad.plot.modes(ds)
    fig.savefig(FIGURES / f"{stem}.png", dpi=130)
    records = modes_summary(ds)
    # Every degree is listed; only those fitted in their linear window have a rate and an SE.
    fitted = [r for rec in records for r in rec["rates"] if r["linear"] and r["se"]]
    for rate in fitted:
        rate["deviation_se"] = (rate["rate"] - rate["theory_power_rate"]) / rate["se"]
    (FIGURES / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
    worst = max(abs(r["deviation_se"]) for r in fitted if not r["driven"])
    print(f"wrote figures/{stem}.png; largest deviation of an unflagged degree {worst:.2f} SE")


if __name__ == "__main__":
    main()
