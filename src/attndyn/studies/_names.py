"""The names of the studies' choices, in a module that imports nothing: the command line
declares its options with them without importing JAX. The defaults are
:mod:`attndyn._core.defaults`'s (the one place that holds each)."""

from .._core import defaults

#: The phase diagrams of seed 003: (β, d) Fig. 3, (β, ε) Fig. 4, (β, N) Fig. 6.
KINDS = ("beta-d", "beta-eps", "beta-n")
#: The main job's model (``attndyn phase-diagram`` with no options): L = 100, T = 100; its
#: grid is ``defaults.COMMAND_GRIDS["phase-diagram"]``.
DEFAULT_DEPTH = defaults.DEPTH
DEFAULT_HORIZON = defaults.horizon_of("phase-diagram")
#: The discrete layer maps or their L → ∞ SDE.
ENGINES = ("discrete", "sde")
#: The attention each kind uses unless said otherwise. Fig. 4 tests Prop. 1, which holds
#: for unnormalised attention (ε_c = √(2·exp(−β))); Figs. 3 and 6 use softmax.
DEFAULT_ATTENTION = {
    kind: defaults.STUDY_DEFAULTS["attention"].get(kind, defaults.ATTENTION) for kind in KINDS
}
#: The noise of ``attndyn modes``: none, scalar (seed 003's ε) or matrix (σ).
MODES_NOISES = ("none", "scalar", "matrix")
