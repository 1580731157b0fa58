"""Seed 004 Fig. 4: cosine similarity against depth with random (Kaiming) weights, per scheme,
with the weights redrawn every layer (as attndyn did before) and frozen (drawn once, kept
across depth, as in a real network at initialisation).

Both panels use the same starts and the same first layer (layer 0's draw is the frozen one).
The summary gives, per scheme and regime, the mean cosine after 1, 8 and the last layer
with a 95 % interval over independent runs (mean ± 1.96·sd/√runs), and the frozen − redrawn
difference with a 95 % interval computed as if the two regimes were independent: they share
each run's start and layer-0 weights (positively correlated), so the interval is
conservative.

Default is scaled down (d = 64, n = 32, β = √d, 32 runs); ``--full-size`` is the paper's
d = 512, one head, β = √d (n = 256).
Run: .venv/bin/python experiments/fig4_random_weights.py [--full-size]
"""

import argparse
import json
import math
from pathlib import Path

import equinox as eqx
import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

import attndyn
from attndyn.plot import category_colors

parser = argparse.ArgumentParser()
parser.add_argument("--full-size", action="store_true")
parser.add_argument("--layers", type=int, default=48)
parser.add_argument("--runs", type=int, default=32)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument(
    "--out",
    default=None,
    help="figure path (default figures/fig4_random_weights[_full].png, by --full-size)",
)
args = parser.parse_args()
# The paper-size run writes beside the committed scaled-down figure, never over it.
args.out = args.out or f"figures/fig4_random_weights{'_full' if args.full_size else ''}.png"
dim, n_tokens = (512, 256) if args.full_size else (64, 32)
beta = math.sqrt(dim)
REGIMES = {
    "redrawn": attndyn.RandomWeights("kaiming", "gaussian", redraw_every=1),
    "frozen": attndyn.RandomWeights("kaiming", "gaussian"),
}


def cosines(scheme, weights) -> np.ndarray:
    keys = jax.random.split(jax.random.key(args.seed), args.runs)
    run = eqx.filter_jit(
        jax.vmap(
            lambda k: attndyn.studies.random_weights_cosine(
                scheme,
                n_tokens=n_tokens,
                dim=dim,
                beta=beta,
                n_layers=args.layers,
                key=k,
                weights=weights,
            )
        )
    )
    return np.asarray(run(keys), np.float64)


def interval(values: np.ndarray) -> list[float]:
    mean, half = values.mean(), 1.96 * values.std(ddof=1) / math.sqrt(len(values))
    return [float(mean), float(mean - half), float(mean + half)]


fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained", sharey=True)
layers = np.arange(args.layers + 1)
colors = category_colors(attndyn.SCHEME_NAMES)  # Okabe–Ito: colour-blind safe
means: dict[str, dict[str, np.ndarray]] = {regime: {} for regime in REGIMES}
every = max(1, len(layers) // 12)  # error bars at a dozen sampled layers
summary: dict = {"d": dim, "n": n_tokens, "beta": beta, "runs": args.runs, "schemes": {}}
at = (1, 8, args.layers)
for name in attndyn.SCHEME_NAMES:
    scheme = attndyn.scheme_from_name(name, tau=0.5, alpha=1.0)
    row = {}
    curves = {}
    for ax, (regime, weights) in zip(axes, REGIMES.items()):
        cos = cosines(scheme, weights)
        curves[regime] = cos
        mean = cos.mean(0)
        # A curve equal to one drawn already (Mix-LN is Post-LN here, within 1e-4) is
        # dashed so that both stay visible.
        same = any(np.max(np.abs(mean - m)) < 1e-4 for m in means[regime].values())
        means[regime][name] = mean
        half = 1.96 * cos.std(0, ddof=1) / math.sqrt(len(cos))  # 95 % interval of the mean
        ax.plot(layers, mean, "--" if same else "-", color=colors[name], label=name)
        ax.errorbar(
            layers[::every], mean[::every], yerr=half[::every], fmt="none",
            ecolor=colors[name], elinewidth=0.9, capsize=2,
        )  # fmt: skip
        row[regime] = {f"layer_{n}": interval(cos[:, n]) for n in at}
    row["frozen_minus_redrawn"] = {
        f"layer_{n}": [
            float(curves["frozen"][:, n].mean() - curves["redrawn"][:, n].mean()),
            float(
                1.96
                * math.sqrt(
                    (curves["frozen"][:, n].var(ddof=1) + curves["redrawn"][:, n].var(ddof=1))
                    / args.runs
                )
            ),
        ]
        for n in at
    }
    summary["schemes"][name] = row
    text = "  ".join(
        f"L{n}: redrawn {row['redrawn'][f'layer_{n}'][0]:.3f} "
        f"frozen {row['frozen'][f'layer_{n}'][0]:.3f} "
        f"(Δ {row['frozen_minus_redrawn'][f'layer_{n}'][0]:+.3f} "
        f"± {row['frozen_minus_redrawn'][f'layer_{n}'][1]:.3f})"
        for n in at
    )
    print(f"{name:13s} {text}", flush=True)
for ax, regime in zip(axes, REGIMES):
    ax.set(
        xlabel="layer",
        title=f"Kaiming weights {regime}"
        + (" every layer" if regime == "redrawn" else " (drawn once)")
        + f"; d = {dim}, n = {n_tokens}, β = √d, {args.runs} runs",
    )
    ax.title.set_fontsize(9)
axes[0].set_ylabel("mean cosine similarity")
handles, labels = axes[0].get_legend_handles_labels()
handles.append(Line2D([], [], color="0.3", marker="|", ms=8, lw=0))
labels.append("95 % interval of the mean (bars)")
fig.legend(handles, labels, loc="outside right upper", fontsize=8)
fig.savefig(args.out, dpi=120)
Path(args.out).with_suffix(".json").write_text(json.dumps(summary, indent=1))
print("wrote", args.out, "and", Path(args.out).with_suffix(".json"))
