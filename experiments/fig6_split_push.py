"""Why three and five tokens have no antipodal pair below β ≈ 2: uneven splits are pushed apart.

*(derived, attndyn.theory.antipodal_split_drift)* k tokens at θ₁ and m at θ₂ = −θ₁ move as
two tokens weighted by k and m; at the antipodal end the common noise turns the two
clusters by different amounts unless k = m, so Z = ⟨θ₁, θ₂⟩ leaves −1 at the rate
≈ 2σ²(d − 1)(k/m − m/k)² e^{−4β}. Three tokens can only split 2 : 1, five 4 : 1 or 3 : 2.

The push balances the contraction that holds two tokens near −1 (rate λ) at
1 + Z ≈ push/λ (attndyn.theory.antipodal_split_level): the split counts as antipodal
(1 + Z ≤ 10⁻³) only where that level is below 10⁻³. Left: the level against β for the
splits of three and five tokens (d = 4). Right: Fig. 6 at the paper's scale (read from
figures/fig6_multitoken_discrete_full.json, made by ``fig6_multitoken.py --full``),
N = 2, 3, 5, with the β where each split's level crosses 10⁻³ (the onset). How fast the
curves then rise to their plateau is set by rare escapes over T = 500, not derived here.
No simulation: a second.

Writes figures/fig6_split_push.{png,json}.
"""

import json

import matplotlib
import numpy as np
from _common import FIGURES
from scipy.optimize import brentq

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from attndyn import theory

DIM, HORIZON, TOL = 4, 500.0, 1e-3
SPLITS = ((2, 1), (3, 2), (4, 1))
BETAS = np.linspace(0.0, 8.0, 161)


def onset_beta(sizes) -> float:
    """The β above which the split hovers within TOL of the antipodal end."""
    level = lambda b: theory.antipodal_split_level(b, DIM, sizes) - TOL  # noqa: E731
    root = brentq(level, 1.0, 10.0)
    assert isinstance(root, float)  # brentq's tuple is only for full_output=True
    return root


def fig6_rows() -> list[dict]:
    path = FIGURES / "fig6_multitoken_discrete_full.json"
    if not path.exists():
        return []
    return [r for r in json.loads(path.read_text()) if r["tokens"] in (2, 3, 5)]


def draw(thresholds: dict, rows: list[dict]) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for sizes in SPLITS:
        levels = [theory.antipodal_split_level(b, DIM, sizes) for b in BETAS]
        left.semilogy(BETAS, levels, label=f"{sizes[0]} : {sizes[1]}")
    left.axhline(TOL, color="k", ls=":", label="classifier's tol = 10⁻³")
    left.axvline(theory.beta_critical(DIM), color="grey", ls="--", lw=0.8, label="β_c(4)")
    left.set(xlabel="β", ylabel="1 + Z where push and contraction balance", ylim=(1e-12, 1))
    left.set_title("Uneven antipodal splits, d = 4 (an even split: 0)")
    left.legend()
    for n in (2, 3, 5):
        mine = sorted((r for r in rows if r["tokens"] == n), key=lambda r: r["beta"])
        if mine:
            p = np.array([r["has_antipodal_pair"] for r in mine])
            beta = [r["beta"] for r in mine]
            right.errorbar(
                beta,
                p[:, 0],
                yerr=[p[:, 0] - p[:, 1], p[:, 2] - p[:, 0]],
                marker="o",
                ms=3,
                capsize=2,
                label=f"N = {n}",
            )
    for sizes, beta in thresholds.items():
        right.axvline(beta, color="grey", ls="--", lw=0.8)
        right.text(beta, 0.02, f" {sizes}", rotation=90, fontsize=8, color="grey")
    right.set(xlabel="β", ylabel="P(has an antipodal pair) at T = 500", ylim=(0, 1))
    right.set_title("Fig. 6 (paper scale) and each split's onset")
    right.legend()
    fig.tight_layout()
    fig.savefig(FIGURES / "fig6_split_push.png", dpi=130)


def main():
    thresholds = {f"{k}:{m}": onset_beta((k, m)) for k, m in SPLITS}
    rows = fig6_rows()
    draw(thresholds, rows)
    record = {
        "dim": DIM,
        "horizon": HORIZON,
        "tol": TOL,
        "onset_beta": thresholds,
        "level_at_beta_2": {
            f"{k}:{m}": theory.antipodal_split_level(2.0, DIM, (k, m)) for k, m in SPLITS
        },
        "push_at_beta_2": {
            f"{k}:{m}": theory.antipodal_split_drift(2.0, DIM, (k, m)) for k, m in SPLITS
        },
        "fig6_data": "figures/fig6_multitoken_discrete_full.json" if rows else None,
    }
    (FIGURES / "fig6_split_push.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["onset_beta"]))


if __name__ == "__main__":
    main()
