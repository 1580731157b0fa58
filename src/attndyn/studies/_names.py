"""The names of the studies' choices, in a module that imports nothing: the command line
declares its options with them without importing JAX."""

#: The phase diagrams of seed 003: (β, d) Fig. 3, (β, ε) Fig. 4, (β, N) Fig. 6.
KINDS = ("beta-d", "beta-eps", "beta-n")
#: The main job's model and grid (``attndyn phase-diagram`` with no options; the CLI's
#: defaults are these). L = 100 keeps the layer map's O(1/√L) bias below the t = ∞ curve
#: (−0.007 at L = 100, d = 10, β = 2: results.md) near half a standard error of 2,000
#: trajectories; T = 100 lets the points beside a threshold settle; the β grid puts points
#: on both sides of β_c(d) for d = 4, 6, 8 (0.66, 1.03, 1.24) but none within 0.15 of one,
#: where the drift away from −1 vanishes and no finite T settles (0:4:0.5 had β = 1.0,
#: 0.03 below β_c(6), with pairs still antipodal at T = 240).
DEFAULT_DEPTH = 100
DEFAULT_HORIZON = 100.0
DEFAULT_BETAS = "0,0.4,0.8,1.5,2,2.5,3,3.5,4"
#: The discrete layer maps or their L → ∞ SDE.
ENGINES = ("discrete", "sde")
#: The attention each kind uses unless said otherwise. Fig. 4 tests Prop. 1, which holds
#: for unnormalised attention (ε_c = √(2·exp(−β))); Figs. 3 and 6 use softmax.
DEFAULT_ATTENTION = {"beta-d": "softmax", "beta-eps": "unnormalized", "beta-n": "softmax"}
#: The noise of ``attndyn modes``: none, scalar (seed 003's ε) or matrix (σ).
MODES_NOISES = ("none", "scalar", "matrix")
