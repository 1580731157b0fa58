"""Closed forms of the theory (spec §4), the reference the simulations are tested against.

Plain NumPy/SciPy in float64: no formula here is shared with the simulations it checks.
What theory takes from the rest of the package, exactly:

- input checks and the error type (``attndyn._core.errors``), and the names of the
  attention kinds (``ATTENTION_KINDS``);
- a norm's codimension and whether it is affine (``attndyn._core.norms``: d or d − 1
  dimensions, :func:`effective_dim`);
- the symmetric start's default radius r0 (``attndyn._core.defaults``), and equinox for
  the frozen records it returns (:func:`terminal_rate_theory`'s is an ``eqx.Module``);
- for the symmetric start, a scheme's own description of its speed factors,
  :meth:`AbstractScheme.speed_laws <attndyn.AbstractScheme.speed_laws>`: a few flags and
  numbers per stretch of time (s ∝ r? ∝ |A|? ∝ √(t + 1)? which α? where Mix-LN switches),
  which the scheme states beside the speed factors it computes, and which a test compares
  with them. Each scheme says what it is; the closed forms built from that description
  (slopes, terminal laws, the time to a gap) are here. It replaces a dispatch on the
  scheme's class, so that a new scheme needs no change here.

The other way round, two simulation routes are built on closed forms from here:
:class:`attndyn.SymmetricODE` integrates Thm 4.1's reduced ODE with this module's
attention terms (``symmetric_attention``), and early absorption takes the scale-function
exponents of the two-token diffusion (``attndyn.theory._phase``).

- Two tokens, full value noise (seed 003 Thm 2, App. C), for RMS or centred LayerNorm
  tokens (``norm=``, :func:`effective_dim`): :func:`beta_critical`,
  :func:`scale_density`, :func:`p_antipodal_given_overlap`, :func:`p_antipodal_uniform`,
  :func:`p_antipodal_curve`, :func:`overlap_start_cdf`, :func:`antipodal_reachable`.
- Hybrid noise (seed 003 Prop. 1 and its softmax analogue): :func:`eps_critical`,
  :func:`sa_hybrid_boundaries`, :func:`hybrid_attracts`, :func:`p_antipodal_hybrid_uniform`,
  :func:`p_antipodal_hybrid_given_overlap`, :func:`hybrid_layer_step`.
- Symmetric start (seed 004 Thm 4.1): :func:`initial_slope`, :func:`terminal_rate_theory`.
- Two exact clusters of k and m tokens (derived): :func:`two_cluster_overlap_coefficients`,
  :func:`antipodal_split_drift` (an uneven antipodal split is pushed apart: metastable),
  :func:`antipodal_contraction_rate`, :func:`antipodal_split_level`,
  :func:`antipodal_split_lifetime` and :func:`antipodal_split_hover_fraction` (its mean
  time to merge and the share of it classified antipodal: first-passage formulas),
  :func:`p_antipodal_pair_three_tokens` (Fig. 6's N = 3 curve, a reading).
- Many tokens, the uniform state (spec §7, derived): :func:`mode_growth_rate` (λ_ℓ of a
  degree-ℓ perturbation, flow or layer maps), :func:`most_unstable_degree` (ℓ*),
  :func:`funk_hecke_exponential` and :func:`funk_hecke_quadrature` (K̂_ℓ of e^{βt}, closed
  form and quadrature), :func:`self_attention_weight` and :func:`critical_gamma` (long
  context, β = γ log N; :func:`critical_gamma` is attndyn's own heuristic, for uniform
  tokens).
- Long context as published (Chen, Lin, Polyanskiy, Rigollet, arXiv:2510.05554, Thm 2.1):
  :func:`simplex_critical_gamma` (γ* = 1/(1 − ρ)), :func:`long_context_regime`,
  :func:`simplex_self_weight` and :func:`simplex_output_overlap` (exact at n and their
  n → ∞ limits, tokens of pairwise overlap ρ).
"""

from typing import TYPE_CHECKING

from .._lazy import attach as _attach

# The public names, each loaded on first use (attndyn._lazy, as for attndyn itself):
# ``from attndyn.theory import beta_critical`` imports the two-token module alone.
if TYPE_CHECKING:
    from ._clusters import (
        antipodal_contraction_rate as antipodal_contraction_rate,
        antipodal_split_drift as antipodal_split_drift,
        antipodal_split_hover_fraction as antipodal_split_hover_fraction,
        antipodal_split_level as antipodal_split_level,
        antipodal_split_lifetime as antipodal_split_lifetime,
        p_antipodal_pair_three_tokens as p_antipodal_pair_three_tokens,
        two_cluster_overlap_coefficients as two_cluster_overlap_coefficients,
    )
    from ._hybrid import (
        depth_for_step as depth_for_step,
        hybrid_attracts as hybrid_attracts,
        hybrid_end_rates as hybrid_end_rates,
        hybrid_layer_step as hybrid_layer_step,
        p_antipodal_hybrid_given_overlap as p_antipodal_hybrid_given_overlap,
        p_antipodal_hybrid_uniform as p_antipodal_hybrid_uniform,
        sa_hybrid_boundaries as sa_hybrid_boundaries,
    )
    from ._long_context import (
        long_context_regime as long_context_regime,
        simplex_critical_gamma as simplex_critical_gamma,
        simplex_output_overlap as simplex_output_overlap,
        simplex_self_weight as simplex_self_weight,
    )
    from ._modes import (
        critical_gamma as critical_gamma,
        funk_hecke_exponential as funk_hecke_exponential,
        funk_hecke_quadrature as funk_hecke_quadrature,
        log_funk_hecke_exponential as log_funk_hecke_exponential,
        mode_growth_rate as mode_growth_rate,
        most_unstable_degree as most_unstable_degree,
        self_attention_weight as self_attention_weight,
    )
    from ._phase import (
        EXACT_BETA_MAX as EXACT_BETA_MAX,
        antipodal_reachable as antipodal_reachable,
        beta_critical as beta_critical,
        effective_dim as effective_dim,
        eps_critical as eps_critical,
        overlap_start_cdf as overlap_start_cdf,
        p_antipodal_curve as p_antipodal_curve,
        p_antipodal_given_overlap as p_antipodal_given_overlap,
        p_antipodal_uniform as p_antipodal_uniform,
        scale_density as scale_density,
    )
    from ._symmetric import (
        RateLaw as RateLaw,
        RateTheory as RateTheory,
        initial_slope as initial_slope,
        terminal_rate_theory as terminal_rate_theory,
    )

# 0.4's names, read with a DeprecationWarning for one release.
__getattr__, __dir__ = _attach(__name__, __file__, globals(), deprecated={"RateKind": "RateLaw"})
