# ruff: noqa: F401 - the renamed re-exports below (see the comment there)
"""Figures of attndyn's results datasets (matplotlib, without pyplot).

``import attndyn`` does not load this package (nor matplotlib); ``attndyn.plot`` does, on
first use. Every figure function returns a :class:`matplotlib.figure.Figure` (``schemes``:
a dict of them; the colour helpers return colours); ``fig.savefig(path)`` writes it, and
the user's matplotlib backend is never changed.

- :func:`phase_diagram`: P(outcome) against β per d, with the exact t = ∞ curves (Fig. 3);
- :func:`beta_eps`: the (β, ε) diagram (Fig. 4);
- :func:`beta_n`: P(has an antipodal pair) against β per N and d (Fig. 6);
- :func:`evolution`: class fractions against time (Figs. 7-9);
- :func:`pair_density`: the peers' (t, β) heatmap of the fraction of clustered pairs (or
  of the span dimension); with one β a panel, the mean against time with its interval;
- :func:`schemes`: the normalization-scheme figures (seed 004 Figs. 2-4, rates, with
  the fitted and the theory's laws drawn);
- :func:`modes`: many tokens from the uniform state (mode growth rates against the
  theory, clusters, the noise and long-context studies).

Every figure's title names the model (scheme, attention, law of the values: the dataset's
provenance fields) and states the parameters and sample sizes. Theory (seed 003's exact
t = ∞ curves and thresholds) is drawn only where it is the model's: Post-LN and its SDE,
as the provenance's ``scheme`` field says; a dataset of another scheme, or one that does
not name its model, gets none, and the title says so.
Colours are colour-blind safe: the Okabe–Ito palette (:data:`OKABE_ITO`,
:func:`category_colors`, :data:`OUTCOME_COLORS`) for categories, viridis
(:func:`ordered_colors`) for ordered values (plasma for the β curves of :func:`beta_eps`,
whose five default β took two greens along viridis).
"""

from typing import TYPE_CHECKING

from .._lazy import attach as _attach

# The public names, each loaded on first use (attndyn._lazy, as for attndyn itself): the
# figure modules, and matplotlib with them, are imported when a figure is asked for. The
# figures are renamed (plot_phase_diagram as phase_diagram), which ruff reads as unused
# imports: _attach lists them in __all__ at run time.
if TYPE_CHECKING:
    from ._density import plot_pair_density as pair_density
    from ._modes import plot_modes as modes
    from ._phase import plot_phase_diagram as phase_diagram
    from ._schemes import plot_schemes as schemes
    from ._sde import (
        plot_beta_eps as beta_eps,
        plot_beta_n as beta_n,
        plot_evolution as evolution,
    )
    from ._style import (
        OKABE_ITO as OKABE_ITO,
        OUTCOME_COLORS as OUTCOME_COLORS,
        category_colors as category_colors,
        ordered_colors as ordered_colors,
    )

__getattr__, __dir__ = _attach(__name__, __file__, globals())
