"""Why three and five tokens have no antipodal pair below β ≈ 2: uneven splits are pushed apart.

*(derived, attndyn.theory.antipodal_split_drift)* k tokens at θ₁ and m at θ₂ = −θ₁ move as
two tokens weighted by k and m; at the antipodal end the common noise turns the two
clusters by different amounts unless k = m, so Z = ⟨θ₁, θ₂⟩ leaves −1 at the rate
≈ 2σ²(d − 1)(k/m − m/k)² e^{−4β}. Three tokens can only split 2 : 1, five 4 : 1 or 3 : 2.

The push balances the contraction that holds two tokens near −1 (rate λ) at
1 + Z ≈ push/λ (attndyn.theory.antipodal_split_level): the split counts as antipodal
(1 + Z ≤ 10⁻³) only where that level is below 10⁻³. Left: the level against β for the
splits of three and five tokens (d = 4). Middle: Fig. 6 at the paper's scale (read from
figures/fig6_multitoken_discrete_full.json, made by ``fig6_multitoken.py --full``),
N = 2, 3, 5, with the β where each split's level crosses 10⁻³ (the onset).

Right: the climb. A split leaves through a rare excursion; its mean lifetime τ(β) and the
share F(β) of it spent within 10⁻³ of −1 are first-passage integrals of the same
diffusion (attndyn.theory.antipodal_split_lifetime, antipodal_split_hover_fraction), so
a split formed early is seen antipodal at T = 500 with probability ≈ F·e^{−T/τ}. The
data divided by their β = 8 value (the plateau: the chance that a split forms) against
that survival.

Three tokens, absolutely (middle, dashed). Once their pairs have settled, three tokens
are one cluster (no antipodal pair) or a 2 : 1 split (two antipodal pairs), so by
exchangeability P(split) = (3/2)·P(a given pair is antipodal), exactly. Reading each
pair as two tokens (P₂, the exact two-token probability, attndyn.theory.
p_antipodal_uniform), a parameter-free curve for N = 3 follows:
(3/2)·P₂(β)·F(β)·e^{−T/τ(β)}. No simulation: a few seconds.

Writes figures/fig6_split_push.{png,json}.
"""

import json

import matplotlib
import numpy as np
from _common import FIGURES, read_summary
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
    return [r for r in read_summary(path) if r["n_tokens"] in (2, 3, 5)]


def survival(beta: float, sizes) -> float:
    """F·e^{−T/τ}: the chance that a k : m split formed early is seen antipodal at T."""
    lifetime = theory.antipodal_split_lifetime(beta, DIM, sizes, tol=TOL)
    return theory.antipodal_split_hover_fraction(beta, DIM, sizes, tol=TOL) * np.exp(
        -HORIZON / lifetime
    )


def three_tokens(beta: float) -> float:
    """(3/2)·P₂·F·e^{−T/τ}: three tokens seen with an antipodal pair at T (see above)."""
    return theory.p_antipodal_pair_three_tokens(beta, DIM, HORIZON, tol=TOL)


def _pair_rows(rows: list[dict], n: int) -> tuple[list[float], np.ndarray]:
    mine = sorted((r for r in rows if r["n_tokens"] == n), key=lambda r: r["beta"])
    return [r["beta"] for r in mine], np.array([r["has_antipodal_pair"] for r in mine])


def draw_climb(axis, rows: list[dict]) -> None:
    betas = np.linspace(1.5, 8.0, 66)
    for sizes, style in (((2, 1), "-"), ((3, 2), "--"), ((4, 1), ":")):
        label = f"{sizes[0]} : {sizes[1]}: F·exp(−T/τ)"
        axis.plot(betas, [survival(b, sizes) for b in betas], "k" + style, lw=1, label=label)
    for n in (3, 5):
        beta, p = _pair_rows(rows, n)
        if beta:
            plateau = p[-1, 0]
            axis.plot(beta, p[:, 0] / plateau, "o", ms=4, label=f"N = {n} data / its β = 8 value")
    axis.set(xlabel="β", ylabel="seen antipodal at T = 500", ylim=(0, 1.05), xlim=(1.5, 8))
    axis.set_title("survival of a split, d = 4, T = 500", fontsize=9)
    axis.legend(fontsize=7)


def draw(thresholds: dict, rows: list[dict]) -> None:
    fig, (left, right, climb) = plt.subplots(
        1, 3, figsize=(12.3, 4.6), layout="constrained"
    )  # 1,599 px
    for sizes in SPLITS:
        levels = [theory.antipodal_split_level(b, DIM, sizes) for b in BETAS]
        left.semilogy(BETAS, levels, label=f"{sizes[0]} : {sizes[1]}")
    left.axhline(TOL, color="k", ls=":", label="classifier's tol = 10⁻³")
    left.axvline(theory.beta_critical(DIM), color="grey", ls="--", lw=0.8, label="β_c(4)")
    left.set(xlabel="β", ylabel="1 + Z where push and contraction balance", ylim=(1e-12, 1))
    left.set_title("level of uneven antipodal splits, d = 4 (even: 0)", fontsize=9)
    left.legend(fontsize=8)
    for n in (2, 3, 5):
        beta, p = _pair_rows(rows, n)
        if beta:
            right.errorbar(
                beta,
                p[:, 0],
                yerr=[p[:, 0] - p[:, 1], p[:, 2] - p[:, 0]],
                marker="o",
                ms=3,
                capsize=2,
                label=f"N = {n}",
            )
    betas = np.linspace(2.0, 8.0, 61)
    three = [three_tokens(b) for b in betas]
    right.plot(betas, three, "k--", lw=1, label="N = 3: (3/2)·P₂·F·exp(−T/τ)")
    for sizes, beta in thresholds.items():
        right.axvline(beta, color="grey", ls="--", lw=0.8)
        right.text(beta, 0.02, f" {sizes}", rotation=90, fontsize=8, color="grey")
    right.set(xlabel="β", ylabel="P(has an antipodal pair) at T = 500", ylim=(0, 1))
    right.set_title(
        "Fig. 6 at paper scale (Wilson 95 % bars), d = 4;\ndashed grey: each split's onset",
        fontsize=9,
    )
    right.legend(fontsize=8, loc="upper left")
    draw_climb(climb, rows)
    fig.savefig(FIGURES / "fig6_split_push.png", dpi=130)


def climb_record(rows: list[dict]) -> dict:
    """At Fig. 6's β from 2 to 8: each split's lifetime, hover fraction and survival, the
    N = 3 prediction, and the N = 3 and 5 data (also divided by their β = 8 value)."""
    betas = [float(b) for b in np.arange(2.0, 8.01, 0.5)]
    record: dict = {"beta": betas}
    for k, m in SPLITS:
        lifetime = [theory.antipodal_split_lifetime(b, DIM, (k, m), tol=TOL) for b in betas]
        hover = [theory.antipodal_split_hover_fraction(b, DIM, (k, m), tol=TOL) for b in betas]
        record[f"{k}:{m}"] = {
            "lifetime": lifetime,
            "hover_fraction": hover,
            "survival": [f * float(np.exp(-HORIZON / t)) for f, t in zip(hover, lifetime)],
        }
    record["N=3 prediction (3/2)·P2·F·exp(-T/tau)"] = [three_tokens(b) for b in betas]
    for n in (3, 5):
        beta, p = _pair_rows(rows, n)
        if beta:
            ratio = dict(zip(beta, p[:, 0] / p[-1, 0], strict=True))
            record[f"N={n} data / plateau"] = [float(ratio[b]) for b in betas]
            record[f"N={n} data"] = [float(dict(zip(beta, p[:, 0], strict=True))[b]) for b in betas]
    return record


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
        "climb": climb_record(rows),
        "fig6_data": "figures/fig6_multitoken_discrete_full.json" if rows else None,
    }
    (FIGURES / "fig6_split_push.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["onset_beta"]))


if __name__ == "__main__":
    main()
