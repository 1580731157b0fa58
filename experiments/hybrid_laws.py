"""The hybrid model near ε_c: how the law of v_n and the depth move the discrete answer.

Seed 003 eq. 7 assumes bounded v_n. At L = 100 the layer step ε·e^β/(2√L) (USA) is not
small near ε_c for β ≳ 2, so the discrete model there depends on the law of v_n. For two
tokens (d = 3, USA, uniform starts, T = 50, 4,000 trajectories a cell) this compares, at a
few (β, ε) around ε_c(β) = √(2e^{−β}): the discrete model with Gaussian, uniform and
Rademacher v_n at L = 100, Rademacher at L = 1,000, the SDE (eq. 8, as the exact overlap
diffusion, dt = 0.01), and the exact t = ∞ answer (Prop. 1: 0 below ε_c, 1 above).

Writes figures/hybrid_laws.json and prints a Markdown table of P(single) and P(antipodal)
with Wilson 95 % intervals.
"""

import argparse
import json
import warnings
from pathlib import Path

import attndyn as ad

FIGURES = Path(__file__).resolve().parents[1] / "figures"
CELLS = [(2.0, 0.45), (2.0, 0.5), (2.0, 0.55), (2.0, 0.6), (1.0, 0.8), (3.0, 0.9)]
ROUTES = [
    ("discrete, Gaussian v, L = 100", {"values": "gaussian", "depth": 100}),
    ("discrete, uniform v, L = 100", {"values": "uniform", "depth": 100}),
    ("discrete, Rademacher v, L = 100", {"values": "rademacher", "depth": 100}),
    ("discrete, Rademacher v, L = 1000", {"values": "rademacher", "depth": 1000}),
    ("SDE (eq. 8), dt = 0.01", {"engine": "sde"}),
]


def estimate(options: dict, n: int, seed: int):
    spec = ad.studies.ModelSpec(
        noise="scalar", attention="unnormalized", horizon=50.0, **{"depth": 100, **options}
    )
    points = [{"dim": 3, "n_tokens": 2, "eps": eps, "beta": beta} for beta, eps in CELLS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = ad.studies.phase_diagram_study(
            "beta-eps",
            spec,
            ad.studies.MonteCarlo(n_trajectories=n, seed=seed),
            points,
            progress=False,
        )
    return ds.isel(time=-1)


def cell(last, i: int, outcome: str) -> list[float]:
    r = last.isel(point=i).sel(outcome=outcome)
    return [float(r["probability"]), float(r["ci_lower"]), float(r["ci_upper"])]


def main():
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--n-trajectories", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rows = []
    for label, options in ROUTES:
        last = estimate(options, args.n_trajectories, args.seed)
        for i, (beta, eps) in enumerate(CELLS):
            rows.append(
                {
                    "route": label,
                    "beta": beta,
                    "eps": eps,
                    "eps_over_eps_c": eps / ad.theory.eps_critical(beta),
                    "step": ad.theory.hybrid_layer_step(beta, eps, options.get("depth", 100)),
                    "single": cell(last, i, "single"),
                    "antipodal": cell(last, i, "antipodal"),
                    "exact_antipodal": float(last["p_antipodal_exact"][i]),
                }
            )
    FIGURES.mkdir(exist_ok=True)
    (FIGURES / "hybrid_laws.json").write_text(json.dumps(rows, indent=1))
    print("| β | ε/ε_c | route | P(single) | P(antipodal) | exact t = ∞ |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, a = r["single"], r["antipodal"]
        print(
            f"| {r['beta']:g} | {r['eps_over_eps_c']:.2f} | {r['route']} | "
            f"{s[0]:.3f} [{s[1]:.3f}, {s[2]:.3f}] | {a[0]:.3f} [{a[1]:.3f}, {a[2]:.3f}] | "
            f"{r['exact_antipodal']:.0f} |"
        )


if __name__ == "__main__":
    main()
