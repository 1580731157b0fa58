"""Figures of attndyn's results datasets (matplotlib, without pyplot).

``import attndyn`` does not load this package (nor matplotlib); ``attndyn.plot`` does, on
first use. Every function returns a :class:`matplotlib.figure.Figure` (``schemes``: a dict
of them); ``fig.savefig(path)`` writes it, and the user's matplotlib backend is never
changed.

- :func:`phase_diagram`: P(outcome) against β per d, with the exact t = ∞ curves (Fig. 3);
- :func:`beta_eps`: the (β, ε) diagram (Fig. 4);
- :func:`beta_n`: P(has an antipodal pair) against β per N (Fig. 6);
- :func:`evolution`: class fractions against time (Figs. 7-9);
- :func:`pair_density`: the peers' (t, β) heatmap of the fraction of clustered pairs (or
  of the span dimension);
- :func:`schemes`: the normalization-scheme figures (seed 004 Figs. 2-4, rates).
"""

from ._density import plot_pair_density as pair_density
from ._phase import plot_phase_diagram as phase_diagram
from ._schemes import plot_schemes as schemes
from ._sde import (
    plot_beta_eps as beta_eps,
    plot_beta_n as beta_n,
    plot_evolution as evolution,
)

__all__ = ["beta_eps", "beta_n", "evolution", "pair_density", "phase_diagram", "schemes"]
