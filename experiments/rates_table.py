"""Terminal rates of 1 − γ (symmetric start, reduced ODE) against seed 004 Thm 4.1.

Run: .venv/bin/python experiments/rates_table.py [--beta 3 --n-tokens 32]
"""

import argparse

import attndyn

parser = argparse.ArgumentParser()
parser.add_argument("--beta", type=float, default=3.0)
parser.add_argument("--n-tokens", type=int, default=32)
parser.add_argument("--dim", type=int, default=32)
parser.add_argument("--alpha", default="1")
args = parser.parse_args()

ds = attndyn.studies.schemes_study(
    n_tokens=args.n_tokens,
    dim=args.dim,
    beta=args.beta,
    horizon=30.0,
    alphas=[float(a) for a in args.alpha.split(",")],
    rw_n_layers=1,
    rw_n_trajectories=1,
)
summary = attndyn.studies.schemes_summary(ds)
print(
    f"{'scheme':13s} {'slope':>9s} {'theory':>9s}  {'law':16s} {'fit':>8s} "
    f"{'interval':>22s} {'theory':>6s}"
)
for name, row in summary["schemes"].items():
    rate = row["terminal_rate"]
    lo, hi = rate["interval"]
    print(
        f"{name:13s} {row['initial_slope']:9.5f} {row['initial_slope_theory']:9.5f}  "
        f"{rate['law']:16s} {rate['value']:8.4f} [{lo:9.4f}, {hi:9.4f}] "
        f"{row['terminal_rate_theory']:6.2f}"
    )
