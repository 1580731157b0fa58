"""attndyn: transformer tokens as interacting particles on the sphere, in JAX."""

from . import theory as theory
from ._absorption import absorption_gaps as absorption_gaps
from ._attention import (
    ATTENTION_KINDS as ATTENTION_KINDS,
    Attention as Attention,
    AttentionKind as AttentionKind,
)
from ._cli_phase import phase_model as phase_model
from ._cli_schemes import (
    plot_schemes as plot_schemes,
    random_weights_cosine as random_weights_cosine,
    schemes_study as schemes_study,
    schemes_summary as schemes_summary,
)
from ._discrete import DiscreteTransformer as DiscreteTransformer
from ._dynamics import AbstractDynamics as AbstractDynamics
from ._errors import NonFiniteError as NonFiniteError, ParameterError as ParameterError
from ._estimate import (
    default_chunk_size as default_chunk_size,
    estimate_probabilities as estimate_probabilities,
    grid as grid,
    point_id as point_id,
    provenance as provenance,
    trajectory_key as trajectory_key,
)
from ._observables import (
    OUTCOMES as OUTCOMES,
    cluster_classes as cluster_classes,
    mean_cosine as mean_cosine,
    n_clusters as n_clusters,
    overlaps as overlaps,
    variance as variance,
)
from ._ode import (
    NormalizedAttentionODE as NormalizedAttentionODE,
    ODESolution as ODESolution,
)
from ._overlap import OverlapSDE as OverlapSDE
from ._plot import plot_phase_diagram as plot_phase_diagram
from ._plot_sde import (
    plot_beta_eps as plot_beta_eps,
    plot_beta_n as plot_beta_n,
    plot_evolution as plot_evolution,
)
from ._rates import (
    RATE_KINDS as RATE_KINDS,
    RateFit as RateFit,
    clustering_time as clustering_time,
    cosine_gap as cosine_gap,
    fit_terminal_rate as fit_terminal_rate,
)
from ._reduced import (
    ReducedTransformer as ReducedTransformer,
    reduce_model as reduce_model,
    reduction_blocker as reduction_blocker,
)
from ._schemes import (
    NGPT as NGPT,
    SCHEME_NAMES as SCHEME_NAMES,
    AbstractScheme as AbstractScheme,
    MixLN as MixLN,
    PeriLN as PeriLN,
    PostLN as PostLN,
    PreLN as PreLN,
    SqrtScaling as SqrtScaling,
    scheme_from_name as scheme_from_name,
)
from ._sde import (
    SDE_SOLVERS as SDE_SOLVERS,
    AbstractSphereSDE as AbstractSphereSDE,
    HybridSDE as HybridSDE,
    ProjectedSolver as ProjectedSolver,
    SDESolution as SDESolution,
    TransformerSDE as TransformerSDE,
    hybrid_correction as hybrid_correction,
)
from ._sphere import (
    normalize as normalize,
    sphere_drift as sphere_drift,
    tangent_project as tangent_project,
    uniform_sphere as uniform_sphere,
)
from ._stats import wilson_interval as wilson_interval
from ._symmetric import (
    SymmetricODE as SymmetricODE,
    SymmetricSolution as SymmetricSolution,
    symmetric_start as symmetric_start,
)
from ._values import (
    DISTRIBUTIONS as DISTRIBUTIONS,
    AbstractValues as AbstractValues,
    DeterministicValues as DeterministicValues,
    MatrixValues as MatrixValues,
    ScalarValues as ScalarValues,
    sample_entries as sample_entries,
)

__version__ = "0.1.0"
