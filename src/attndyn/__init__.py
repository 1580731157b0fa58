"""attndyn: transformer tokens as interacting particles on the sphere, in JAX.

The package reads from the bottom up:

- the core (one configuration ``X`` of shape ``(N, d)``): :class:`Attention`, the value
  operators, the normalization schemes and their norms (RMS, centred LayerNorm), frozen
  random weights, seed 002's step, :class:`SaveAt`, sphere geometry and observables;
- the models, behind one batch-level interface (:class:`AbstractModel`): discrete layer
  maps, normalized-attention ODEs, common-noise SDEs, the two-token overlap diffusion, the
  symmetric-start ODE, and exact reduced forms;
- the estimator (:func:`estimate_probabilities`), which sees models only through that
  interface;
- :mod:`attndyn.theory` (closed forms), :mod:`attndyn.studies` (the typed studies behind
  the CLI) and :mod:`attndyn.plot` (figures).

Every name is loaded on first use, so ``import attndyn`` is cheap and loads neither JAX,
matplotlib nor the CLI's click until they are needed.
"""

from typing import TYPE_CHECKING

from ._lazy import attach as _attach
from ._version import __version__ as __version__

# The public names, each loaded on first use (attndyn._lazy): ``import attndyn`` imports
# neither JAX nor anything else heavy, so the command line starts in a fraction of a
# second; ``attndyn.Attention`` (or ``from attndyn import Attention``) imports its module.
if TYPE_CHECKING:
    from . import plot as plot, studies as studies, theory as theory
    from ._core.attention import (
        ATTENTION_KINDS as ATTENTION_KINDS,
        LAPLACIAN_SIGNS as LAPLACIAN_SIGNS,
        Attention as Attention,
        AttentionKind as AttentionKind,
    )
    from ._core.eigenmaps import EigenmapsStep as EigenmapsStep
    from ._core.errors import (
        DistributedError as DistributedError,
        NonFiniteError as NonFiniteError,
        NumericalMergeError as NumericalMergeError,
        NumericalMergeWarning as NumericalMergeWarning,
        ParameterError as ParameterError,
    )
    from ._core.many_tokens import (
        Clusters as Clusters,
        ManyTokenObservables as ManyTokenObservables,
        cluster_labels as cluster_labels,
        clusters as clusters,
        log_interaction_energy as log_interaction_energy,
        many_token_observables as many_token_observables,
        min_distance as min_distance,
        mode_powers as mode_powers,
    )
    from ._core.norms import (
        NORM_NAMES as NORM_NAMES,
        AbstractNorm as AbstractNorm,
        LayerNorm as LayerNorm,
        RMSNorm as RMSNorm,
    )
    from ._core.observables import (
        OUTCOMES as OUTCOMES,
        PairObservables as PairObservables,
        cluster_classes as cluster_classes,
        mean_cosine as mean_cosine,
        n_clusters as n_clusters,
        numerically_merged as numerically_merged,
        overlaps as overlaps,
        pair_density as pair_density,
        pair_observables as pair_observables,
        span_dimension as span_dimension,
        variance as variance,
    )
    from ._core.saveat import SaveAt as SaveAt
    from ._core.schemes import (
        NGPT as NGPT,
        SCHEME_NAMES as SCHEME_NAMES,
        AbstractScheme as AbstractScheme,
        MixLN as MixLN,
        PeriLN as PeriLN,
        PostLN as PostLN,
        PreLN as PreLN,
        SpeedLaw as SpeedLaw,
        SqrtScaling as SqrtScaling,
        scheme_from_name as scheme_from_name,
    )
    from ._core.sphere import (
        normalize as normalize,
        sphere_drift as sphere_drift,
        tangent_project as tangent_project,
        uniform_sphere as uniform_sphere,
    )
    from ._core.values import (
        DISTRIBUTIONS as DISTRIBUTIONS,
        AbstractValues as AbstractValues,
        DeterministicValues as DeterministicValues,
        MatrixValues as MatrixValues,
        ScalarValues as ScalarValues,
    )
    from ._core.weights import (
        BILINEAR_LAWS as BILINEAR_LAWS,
        VALUE_LAWS as VALUE_LAWS,
        DrawnWeights as DrawnWeights,
        RandomWeights as RandomWeights,
    )
    from ._estimate.dataset import provenance as provenance
    from ._estimate.estimator import estimate_probabilities as estimate_probabilities
    from ._estimate.plan import grid as grid
    from ._estimate.stats import wilson_interval as wilson_interval
    from ._io.distributed import initialize_distributed as initialize_distributed
    from ._io.metadata import open_dataset as open_dataset, to_netcdf as to_netcdf
    from ._io.runtime import (
        enable_compilation_cache as enable_compilation_cache,
        use_all_cores as use_all_cores,
    )
    from ._models.base import (
        ROUTES as ROUTES,
        AbstractModel as AbstractModel,
        AbstractTrajectoryModel as AbstractTrajectoryModel,
        Reduction as Reduction,
        Route as Route,
        select_route as select_route,
    )
    from ._models.discrete import (
        DiscreteTransformer as DiscreteTransformer,
        eigenmaps_transformer as eigenmaps_transformer,
    )
    from ._models.integrators import (
        SDE_SOLVERS as SDE_SOLVERS,
        AbstractItoSDE as AbstractItoSDE,
        ODEIntegrator as ODEIntegrator,
        ProjectedSolver as ProjectedSolver,
        SDEIntegrator as SDEIntegrator,
    )
    from ._models.mean_field import (
        MeanFieldFlow as MeanFieldFlow,
        MeanFieldSolution as MeanFieldSolution,
    )
    from ._models.ode import (
        NormalizedAttentionODE as NormalizedAttentionODE,
        ODESolution as ODESolution,
    )
    from ._models.overlap import (
        AbstractOverlapSDE as AbstractOverlapSDE,
        OverlapSDE as OverlapSDE,
        OverlapSolution as OverlapSolution,
    )
    from ._models.reduced.frame_route import ReducedTransformer as ReducedTransformer
    from ._models.sde import (
        AbstractSphereSDE as AbstractSphereSDE,
        HybridSDE as HybridSDE,
        SDESolution as SDESolution,
        TransformerSDE as TransformerSDE,
    )
    from ._models.symmetric import (
        SymmetricODE as SymmetricODE,
        SymmetricSolution as SymmetricSolution,
        symmetric_start as symmetric_start,
    )

__getattr__, __dir__ = _attach(__name__, __file__, globals())
