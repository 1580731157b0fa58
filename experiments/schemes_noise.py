"""New science: every normalization scheme under full value noise (seed 003's setting).

V_n = Ξ_n/√L with Ξ_n Gaussian d×d (σ = 1), one draw per layer shared by the tokens; the
schemes' layer maps of spec §2 with that V_n. Uniform starts on the sphere, Q = K = I,
softmax. For each scheme: P(single cluster) and P(antipodal) against time with Wilson
95 % intervals, and for Post-LN the exact t = ∞ two-token probability of seed 003.

Run: .venv/bin/python experiments/schemes_noise.py [--n-trajectories 2000 --horizon 40]
"""

import argparse
import json

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

import attndyn
from attndyn.plot import category_colors

parser = argparse.ArgumentParser()
parser.add_argument("--beta", type=float, default=2.0)
parser.add_argument("--dim", type=int, default=4)
parser.add_argument("--n-tokens", type=int, default=2)
parser.add_argument("--depth", type=int, default=20)
parser.add_argument("--horizon", type=float, default=40.0)
parser.add_argument("--n-trajectories", type=int, default=1000)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--out", default="figures/schemes_noise.png")
args = parser.parse_args()

saveat = (1.0, 2.0, 5.0, 10.0, 20.0, 40.0)
saveat = tuple(t for t in saveat if t <= args.horizon)


def model(*, scheme: str, dim: int, n_tokens: int):
    del dim, n_tokens
    return attndyn.DiscreteTransformer(
        attndyn.Attention(args.beta),
        attndyn.MatrixValues(1.0),
        attndyn.scheme_from_name(scheme, tau=0.5, alpha=1.0),
        depth=args.depth,
        saveat=attndyn.SaveAt(args.horizon, saveat),
    )


points = attndyn.grid(scheme=list(attndyn.SCHEME_NAMES), dim=[args.dim], n_tokens=[args.n_tokens])
ds = attndyn.estimate_probabilities(
    model,
    points,
    key=jax.random.key(args.seed),
    n_trajectories=args.n_trajectories,
    progress=False,
)
exact = (
    attndyn.theory.p_antipodal_uniform(args.beta, args.dim) if args.n_tokens == 2 else float("nan")
)
fig, axes = plt.subplots(1, 3, figsize=(13.3, 4.4), layout="constrained")  # 1,596 px
colors = category_colors(attndyn.SCHEME_NAMES)  # Okabe–Ito: colour-blind safe
times = ds["time"].values
summary = {}
for i, name in enumerate(attndyn.SCHEME_NAMES):
    row = ds.isel(point=i)
    summary[name] = {}
    for ax, outcome in zip(axes[:2], ("single", "antipodal")):
        p = row["probability"].sel(outcome=outcome).values
        lo = row["ci_lower"].sel(outcome=outcome).values
        hi = row["ci_upper"].sel(outcome=outcome).values
        # Wilson 95 % intervals as error bars at the save times (never a band between them).
        ax.errorbar(
            times, p, yerr=[p - lo, hi - p], fmt="o-", ms=3, capsize=2, color=colors[name],
            label=name, elinewidth=0.8,
        )  # fmt: skip
        summary[name][outcome] = [[float(a), float(b), float(c)] for a, b, c in zip(p, lo, hi)]
    cos = row["mean_cosine"].values if "mean_cosine" in row else None
    if cos is not None:
        axes[2].plot(times, 1 - cos, "o-", ms=3, color=colors[name], label=name)
axes[1].axhline(exact, color="k", ls="--", lw=0.8, label="Post-LN, exact t = ∞")
axes[0].set(xlabel="t", ylabel="P(single cluster)", xscale="log")
axes[1].set(xlabel="t", ylabel="P(antipodal)", xscale="log")
axes[2].set(xlabel="t", ylabel="1 − mean cosine", xscale="log", yscale="log")
handles, labels = axes[0].get_legend_handles_labels()
handles.append(Line2D([], [], color="k", ls="--", lw=0.8))
labels.append("Post-LN, exact t = ∞")
handles.append(Line2D([], [], color="0.3", marker="|", ms=8, lw=0))
labels.append("Wilson 95 % (bars)")
fig.legend(handles, labels, loc="outside lower center", ncols=8, fontsize=8)
fig.suptitle(
    "Schemes under value noise: "
    f"V = Ξ/√L with Gaussian Ξ (σ = 1), β = {args.beta}, d = {args.dim}, N = {args.n_tokens}, "
    f"L = {args.depth}, {args.n_trajectories} trajectories per scheme"
)
fig.savefig(args.out, dpi=120)
print(json.dumps({"times": list(map(float, times)), "exact_post_ln": exact, **summary}))
print("wrote", args.out)
