"""Closed forms of the theory (spec §4), the reference the simulations are tested against."""

from ._symmetric import (
    RateTheory as RateTheory,
    initial_slope as initial_slope,
    terminal_rate_theory as terminal_rate_theory,
)
from ._theory import (
    antipodal_reachable as antipodal_reachable,
    beta_critical as beta_critical,
    eps_critical as eps_critical,
    overlap_start_cdf as overlap_start_cdf,
    p_antipodal_curve as p_antipodal_curve,
    p_antipodal_given_overlap as p_antipodal_given_overlap,
    p_antipodal_uniform as p_antipodal_uniform,
    scale_density as scale_density,
)
