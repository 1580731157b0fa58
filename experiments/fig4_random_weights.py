"""Seed 004 Fig. 4: cosine similarity against depth with random (Kaiming) weights, per scheme.

Default is scaled down (d = 64, n = 32, β = √d); ``--full-size`` is the paper's d = 512,
one head, β = √d (n = 256).
Run: .venv/bin/python experiments/fig4_random_weights.py [--full-size]
"""

import argparse
import math

import equinox as eqx
import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import attndyn
from attndyn.plot import category_colors

parser = argparse.ArgumentParser()
parser.add_argument("--full-size", action="store_true")
parser.add_argument("--layers", type=int, default=48)
parser.add_argument("--runs", type=int, default=16)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--out", default="figures/fig4_random_weights.png")
args = parser.parse_args()
dim, tokens = (512, 256) if args.full_size else (64, 32)
beta = math.sqrt(dim)

keys = jax.random.split(jax.random.key(args.seed), args.runs)
fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
layers = np.arange(args.layers + 1)
colors = category_colors(attndyn.SCHEME_NAMES)  # Okabe–Ito: colour-blind safe
for name in attndyn.SCHEME_NAMES:
    scheme = attndyn.scheme_from_name(name, tau=0.5, alpha=1.0)
    run = eqx.filter_jit(
        jax.vmap(
            lambda k, s=scheme: attndyn.studies.random_weights_cosine(
                s, n_tokens=tokens, dim=dim, beta=beta, n_layers=args.layers, key=k
            )
        )
    )
    cos = np.asarray(run(keys))
    lo, hi = np.quantile(cos, [0.05, 0.95], axis=0)
    ax.plot(layers, cos.mean(0), color=colors[name], label=name)
    ax.fill_between(layers, lo, hi, color=colors[name], alpha=0.15, lw=0)
    print(
        f"{name:13s} cosine after 1, 8, {args.layers} layers: "
        f"{cos.mean(0)[1]:.3f} {cos.mean(0)[8]:.3f} {cos.mean(0)[-1]:.3f}"
    )
ax.set(
    xlabel="layer",
    ylabel="mean cosine similarity",
    title="Seed 004 Fig. 4: with random weights, Peri-LN and nGPT move tokens most in the first "
    f"layer\nQ, K, V re-drawn per layer (Kaiming), d = {dim}, n = {tokens}, β = √d; "
    f"mean of {args.runs} runs, 90 % band",
)
ax.legend(fontsize=8)
fig.savefig(args.out, dpi=120)
print("wrote", args.out)
