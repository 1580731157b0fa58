"""The names users pass as strings to the core and the studies (attention kinds, value
laws, norms, schemes, SDE solvers, value noises), in a module that imports nothing: the
command line declares its options with them without importing JAX."""

#: Attention normalizations: softmax (SA) or unnormalised (USA).
ATTENTION_KINDS = ("softmax", "unnormalized")
#: Laws of the random values.
DISTRIBUTIONS = ("gaussian", "uniform", "rademacher", "truncnormal")
#: Token normalizations of Post-LN: RMS (the unit sphere) or centred LayerNorm.
NORM_NAMES = ("rms", "layernorm")
#: The normalization schemes of seed 004.
SCHEME_NAMES = ("post-ln", "pre-ln", "mix-ln", "peri-ln", "ngpt", "sqrt-scaling")
#: How attention is computed: chosen by N, the dense N × N matrix, blocks of queries,
#: ``jax.nn.dot_product_attention``, or the kernel's harmonic expansion (Q = K = I on S¹
#: and S²).
IMPLEMENTATIONS = ("auto", "dense", "blockwise", "library", "spectral")
#: The SDE solvers offered by name (the CLI's ``--solver``, the studies' ``solver=``); each
#: name stands for one diffrax solver object (:func:`attndyn._models.integrators.sde_solver`).
SDE_SOLVER_NAMES = ("euler", "heun", "spark")
#: The value noise added to the attention flow V = I/L, in every study and command
#: (``noise=``, ``--noise``): none; scalar, V_n = (1/L + ε v_n/√L)·I (seed 003 eq. 7, its
#: SDE eq. 8); matrix, V_n = drift·I/L + σ M_n/√L (eq. 4, its SDE eq. 6).
NOISE_NAMES = ("none", "scalar", "matrix")
#: The evolution study's models (a point's ``model`` coordinate, on which its random
#: numbers depend, and 0.5's ``--model``) and the noise each runs.
EVOLUTION_MODELS = {"full": "matrix", "hybrid": "scalar", "deterministic": "none"}
