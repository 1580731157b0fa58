"""Seed 004 Fig. 3: nGPT from the symmetric start for several α (constant, and one schedule).

Run: .venv/bin/python experiments/fig3_ngpt_alpha.py
"""

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import attndyn
from attndyn.plot import OKABE_ITO, ordered_colors

parser = argparse.ArgumentParser()
parser.add_argument("--beta", type=float, default=3.0)
parser.add_argument("--n-tokens", type=int, default=32)
parser.add_argument("--horizon", type=float, default=20.0)
parser.add_argument("--out", default="figures/fig3_ngpt_alpha.png")
args = parser.parse_args()

ts = np.linspace(0, args.horizon, 201)
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
alphas = (0.25, 0.5, 1.0, 2.0, 4.0)
cases = [(f"α = {a:g}", attndyn.NGPT(alpha=a)) for a in alphas]
cases.append(("α(t) = 1/(1+t)", attndyn.NGPT(alpha_schedule=lambda t: 1.0 / (1.0 + t))))
# Constant α is ordered: viridis. The schedule is another kind of case: Okabe–Ito vermillion.
colors = [*ordered_colors(len(alphas)), OKABE_ITO[1]]
last_gap = 1.0
for (label, scheme), color in zip(cases, colors):
    sol = attndyn.SymmetricODE(
        scheme, args.beta, n_tokens=args.n_tokens, saveat=attndyn.SaveAt(args.horizon, ts)
    ).solve()
    axes[0].plot(ts, sol.gamma, color=color, label=label)
    axes[1].semilogy(ts, sol.gap, color=color, label=label)
    last_gap = float(sol.gap[-1])
    slope = attndyn.theory.initial_slope(scheme, beta=args.beta, n_tokens=args.n_tokens)
    print(f"{label:16s} γ'(0) = {slope:.4f}, 1 − γ(T) = {float(sol.gap[-1]):.3e}")
# The schedule's law e^{−2∫α} = (1+t)^{−2}: a power law (dashed guide, anchored at T).
guide = last_gap  # the schedule (last case) at T
axes[1].plot(
    ts[20:],
    guide * ((1 + ts[20:]) / (1 + ts[-1])) ** -2.0,
    "k--",
    lw=0.8,
    label=r"$\propto (1+t)^{-2}$ (guide)",
)
axes[0].set(xlabel="t", ylabel="γ(t)")
axes[0].set_title("γ(t)", fontsize=9)
axes[1].set(xlabel="t", ylabel="1 − γ(t)", ylim=(1e-12, 2))
axes[1].set_title(r"gap $1-\gamma$; theory: $e^{-2\int \alpha}$", fontsize=9)
fig.suptitle(
    f"Seed 004 Fig. 3: nGPT, symmetric start, β = {args.beta}, n = d = {args.n_tokens}, "
    "reduced ODE (no sampling)"
)
fig.legend(*axes[1].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
fig.savefig(args.out, dpi=120)
print("wrote", args.out)
