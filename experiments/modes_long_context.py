"""Many tokens at long context: β = γ log N (spec §7; Chen, Lin, Polyanskiy, Rigollet).

N = 64 … 2,048 tokens uniform on S^{d−1}, d = 32, softmax, Post-LN layer maps, L = 100,
T = 10, γ = 0.5 … 2. At the horizon: the share of tokens in the largest cluster and the
clusters per token, beside γ_c(N, d), where a token's softmax weight on itself among N
uniform tokens is ½ (attndyn.theory.critical_gamma). Reduced: 4 trajectories a point.
--full: 16, and N up to 4,096.

Writes figures/modes_long_context[_full].{png,json} (and .nc, not committed).
"""

import json

from _common import FIGURES, figure_stem, parser

import attndyn as ad
from attndyn.studies import ModesRun, ModesSpec, modes_points, modes_study, modes_summary


def main():
    args = parser(__doc__).parse_args()
    if args.engine != "discrete":
        raise SystemExit("modes_long_context runs the layer maps (--engine discrete).")
    n, n_tokens = (16, [64, 256, 1024, 4096]) if args.full else (4, [64, 256, 1024, 2048])
    spec = ModesSpec(horizon=10.0, saves=21, depth=100)
    run = ModesRun(n_trajectories=n, seed=args.seed, ell_max=4)
    gammas = [0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
    ds = modes_study(spec, run, modes_points(dims=[32], n_tokens=n_tokens, gammas=gammas))
    stem = figure_stem("modes_long_context", args)
    ds.to_netcdf(FIGURES / f"{stem}.nc")  # the data behind the figure (not committed)
    ad.plot.modes(ds).savefig(FIGURES / f"{stem}.png", dpi=130)
    records = modes_summary(ds)
    for r in records:
        r["gamma_critical"] = ad.theory.critical_gamma(r["n_tokens"], r["dim"])
    (FIGURES / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
    for r in records:
        share, se = r["largest_fraction_end"]
        print(f"N = {r['n_tokens']}, gamma = {r['gamma']}: largest {share:.3f} ± {se:.3f}")


if __name__ == "__main__":
    main()
