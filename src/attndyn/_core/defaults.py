"""Every user-facing parameter once: its name, the papers' symbol, meaning, unit, default,
where it applies and its command-line flag.

The one place that holds each default. The models, the study specs
(:class:`attndyn.studies.ModelSpec`, :class:`attndyn.studies.MonteCarlo`,
:class:`attndyn.studies.ModesSpec`, :class:`attndyn.studies.ModesRun`), the study functions
and the command line read their defaults here, and the docs' reference page
(``docs/reference/parameters.md``) is this table, checked against it by a test. Where a
study needs another value than the shared default, the choice is the study's, made and
argued here (:data:`STUDY_DEFAULTS`), never a literal at its call site.

This module imports nothing: the command line declares its options with these values
without importing JAX.
"""

import dataclasses
from typing import Final

#: The depth L (layers per unit time; the layer step is 1/L) of every discrete model and
#: study. L = 100 keeps the layer map's O(1/√L) bias below the t = ∞ curve (−0.007 at
#: L = 100, d = 10, β = 2: docs/results.md) near half a standard error of 2,000
#: trajectories.
DEPTH: Final = 100
#: The horizon T of a model built without a :class:`attndyn.SaveAt` (one unit of time).
MODEL_HORIZON: Final = 1.0
#: Trajectories per point of the Monte Carlo studies (phase diagrams, evolution): Wilson
#: intervals of about ±0.022 at p = 1/2.
N_TRAJECTORIES: Final = 2000
#: The clustering tolerance: two tokens are together when their cosine is ≥ 1 − tol.
TOL: Final = 1e-3
#: The seed of the study's PRNG key.
SEED: Final = 0
#: σ, the scale of the full (matrix) value noise.
SIGMA: Final = 1.0
#: The SDE engine's step dt and solver.
DT: Final = 0.01
SOLVER: Final = "euler"
#: The phase diagram the command line runs: (β, d), seed 003 Fig. 3 (``beta-eps``: (β, ε),
#: Fig. 4; ``beta-n``: (β, N), Fig. 6; 0.4 called it the diagram's "kind").
DIAGRAM: Final = "beta-d"
#: The engine of the studies: the discrete layer maps (``"sde"``: their L → ∞ limit).
ENGINE: Final = "discrete"
#: The attention of every model and study (``"unnormalized"``: USA).
ATTENTION: Final = "softmax"
#: The token normalisation of Post-LN.
NORM: Final = "rms"
#: The normalization scheme of the layer maps: Post-LN, the scheme of seed 003 and of the
#: theory of the modes (:data:`attndyn.SCHEME_NAMES` lists the others).
SCHEME: Final = "post-ln"
#: How attention is computed: ``auto`` attends in blocks above 2,048 tokens (memory
#: block × N instead of N × N).
IMPLEMENTATION: Final = "auto"
#: The largest degree ℓ of the mode powers P_ℓ.
ELL_MAX: Final = 16
#: The value noise added to the attention flow: none, scalar (ε) or matrix (σ), in every
#: study (0.4's phase diagrams and evolution said full and hybrid for matrix and scalar).
NOISE: Final = "matrix"
#: What the estimator does with a trajectory that overflowed (NaN or inf): stop
#: (``"raise"``) or drop it from the probabilities, counted (``"exclude"``).
ON_NONFINITE: Final = "raise"
#: What the estimator does with trajectories whose tokens merged numerically.
ON_MERGED: Final = "auto"
#: The bound on the probability that a shortcut changes a trajectory's class: early
#: absorption's (``early_absorption=True`` or ``"auto"``; see
#: :mod:`attndyn._models.reduced.absorption`) and that of a float32 merge counted without
#: a float64 rerun (``on_merged="auto"``; :mod:`attndyn._estimate.merges`). Over n
#: trajectories at most n·10⁻⁷ changed classes are expected, far below the Monte Carlo
#: error.
CLASS_CHANGE_BOUND: Final = 1e-7
#: Seconds every process of a multi-host run waits for the coordinator and all the
#: processes to join (``--coordinator-timeout``, ``ATTNDYN_COORDINATOR_TIMEOUT``).
COORDINATOR_TIMEOUT: Final = 120
#: Mix-LN's switch τ: Post-LN for the first ⌈τL⌉ layers, Pre-LN after (seed 004's middle
#: choice).
TAU: Final = 0.5
#: nGPT's step α (seed 004, eq. 9: α = 1 is the plain normalized step).
ALPHA: Final = 1.0
#: The radius r0 of the symmetric start of the schemes' ODEs (unit tokens: seed 004).
R0: Final = 1.0

#: The studies' own choices where they differ from the shared default, and why.
#: ``horizon``: the phase diagram's T = 100 lets the points beside a threshold settle (the
#: main job, ``attndyn phase-diagram``); evolution's T = 50 is seed 003's Figs. 7-8;
#: schemes' T = 60 lets the slowest scheme (sqrt-scaling) reach its terminal rate; modes'
#: T = 12 covers the linear growth of the modes and the start of the plateau at N = 4096.
#: ``n_trajectories``: modes runs 8 trajectories of 4,096 tokens (its estimates average over
#: the tokens as well). ``noise``: the modes of the uniform state (spec §7) grow in the
#: noiseless flow. ``saves``: evolution's 51 and modes' 121 evenly spaced save times.
#: ``attention``: seed 003 Fig. 4 (``beta-eps``) tests Prop. 1, which holds for
#: unnormalised attention. ``early_absorption``: the command line stops two-token
#: trajectories once their class is settled up to 1e-7 (``"auto"``); the Python
#: :class:`~attndyn.studies.MonteCarlo` simulates every layer unless asked (``None``), as
#: it did in 0.4, so that a script's numbers do not change. ``n_tokens``, ``dim``, ``beta``
#: of the schemes study (:data:`SCHEMES_N_TOKENS`, …): the symmetric start needs n ≤ d;
#: n = d = 32 and β = 3 put every scheme's terminal rate within T = 60 and its γ(t) curve
#: well away from 0 and 1.
SCHEMES_N_TOKENS: Final = 32
SCHEMES_DIM: Final = 32
SCHEMES_BETA: Final = 3.0
STUDY_DEFAULTS: Final = {
    "horizon": {"phase-diagram": 100.0, "evolution": 50.0, "schemes": 60.0, "modes": 12.0},
    "n_trajectories": {"modes": 8},
    "noise": {"modes": "none"},
    "n_tokens": {"schemes": SCHEMES_N_TOKENS},
    "dim": {"schemes": SCHEMES_DIM},
    "beta": {"schemes": SCHEMES_BETA},
    "saves": {"evolution": 51, "modes": 121},
    "attention": {"beta-eps": "unnormalized"},
    "early_absorption": {"command line": "auto"},
}
#: The phase diagram's β grid (``attndyn phase-diagram`` with no options): points on both
#: sides of β_c(d) for d = 4, 6, 8 (0.66, 1.03, 1.24) but none within 0.14 of one, where
#: the drift away from −1 vanishes and no finite T settles (0:4:0.5 had β = 1.0, 0.03
#: below β_c(6), with pairs still antipodal at T = 240).
PHASE_BETAS: Final = "0,0.4,0.8,1.5,2,2.5,3,3.5,4"
#: The points each command runs with no options (its grid, as the command line reads it;
#: the models and the study functions take the points they are given). phase-diagram: seed
#: 003 Fig. 3 (two tokens, d = 4, 6, 8, :data:`PHASE_BETAS`) and Fig. 4's ε for
#: ``--diagram beta-eps``, which runs Fig. 4's d = 3 (its own entry: d = 4, 6, 8 there were
#: 540 cells, ~12 minutes, and not the paper's figure); evolution: seed 003 Figs. 7-8
#: (β = 5, d = 4, N = 50, ε = 1 for the hybrid model); modes: the growth of the modes of
#: 4,096 tokens on the circle at β = 4, 9, 16 (spec §7). The schemes study's n, d, β are
#: :data:`SCHEMES_N_TOKENS`, … above.
COMMAND_GRIDS: Final = {
    "phase-diagram": {"beta": PHASE_BETAS, "dim": "4,6,8", "n_tokens": "2", "eps": "0.1:2:0.1"},
    "phase-diagram --diagram beta-eps": {"dim": "3"},
    "evolution": {"beta": "5", "dim": "4", "n_tokens": "50", "eps": "1.0"},
    "modes": {"beta": "4,9,16", "dim": "2", "n_tokens": "4096"},
}


def _grid_defaults(name: str, schemes: str | None = None) -> str:
    """The reference page's default of a grid parameter: none on the models and study
    functions, then each command's (:data:`COMMAND_GRIDS`)."""
    shown = [f"{c}: {g[name]}" for c, g in COMMAND_GRIDS.items() if name in g]
    shown += [] if schemes is None else [f"schemes: {schemes}"]
    return "— (models); " + "; ".join(shown)


HORIZON: Final = STUDY_DEFAULTS["horizon"]
#: The schemes study's nGPT steps α (part b; the first is the rate table's) and its
#: random-weight stacks (part c: d, n, layers and trajectories, small enough for a 2-core CPU;
#: ``--full-size`` runs seed 004's d = 512, n = 256).
SCHEMES_ALPHAS: Final = (1.0, 0.5, 2.0, 4.0)
RANDOM_WEIGHTS: Final = {
    "rw_dim": 64,
    "rw_n_tokens": 32,
    "rw_n_layers": 48,
    "rw_n_trajectories": 8,
}


def horizon_of(study: str) -> float:
    """The default horizon T of ``study`` (:data:`STUDY_DEFAULTS`)."""
    return HORIZON[study]


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One parameter of the vocabulary (a row of the reference page)."""

    name: str
    symbol: str
    meaning: str
    unit: str
    default: str
    applies: str
    flag: str


#: The vocabulary: each parameter under one name, in the API, the CLI, the datasets and the
#: docs. ``default`` is shown as the docs show it (rendered from the constants above).
PARAMETERS: Final = (
    Parameter(
        "beta",
        "β",
        "inverse temperature of attention",
        "1",
        _grid_defaults("beta", f"{SCHEMES_BETA:g}"),
        "all",
        "--beta",
    ),
    Parameter(
        "dim",
        "d",
        "token dimension (tokens on S^(d−1))",
        "1",
        _grid_defaults("dim", str(SCHEMES_DIM)),
        "all",
        "--dim",
    ),
    Parameter(
        "n_tokens",
        "N",
        "number of tokens per trajectory",
        "1 (count)",
        _grid_defaults("n_tokens", str(SCHEMES_N_TOKENS)),
        "all",
        "--n-tokens",
    ),
    Parameter(
        "depth",
        "L",
        "layers per unit time (layer step 1/L)",
        "layers per unit of t",
        str(DEPTH),
        "discrete models, studies",
        "--depth",
    ),
    Parameter(
        "step",
        "η",
        "a real layer step instead of depth (t = nη)",
        "1 (model time t)",
        "None (1/L)",
        "discrete models, studies",
        "--step",
    ),
    Parameter(
        "horizon",
        "T",
        "time horizon (L·T layers)",
        "1 (model time t)",
        f"{MODEL_HORIZON:g} (models); " + ", ".join(f"{v:g} ({k})" for k, v in HORIZON.items()),
        "models (SaveAt), studies",
        "--horizon",
    ),
    Parameter(
        "saveat",
        "",
        "when a model records its state: SaveAt(horizon, ts) on models; the "
        "save times (a tuple in [0, T]) on ModelSpec",
        "1 (model time t)",
        "None (T only)",
        "models, ModelSpec",
        "",
    ),
    Parameter(
        "saves",
        "",
        "number of evenly spaced save times in [0, T]",
        "1",
        ", ".join(f"{v} ({k})" for k, v in STUDY_DEFAULTS["saves"].items()),
        "evolution, modes",
        "--saves",
    ),
    Parameter(
        "n_trajectories",
        "",
        "trajectories per point",
        "1 (count)",
        f"{N_TRAJECTORIES} ({STUDY_DEFAULTS['n_trajectories']['modes']} for modes)",
        "estimator, studies",
        "--n-trajectories",
    ),
    Parameter(
        "tol",
        "",
        "clustering tolerance: tokens together when cosine ≥ 1 − tol",
        "1",
        f"{TOL:g} (modes: from N and d)",
        "estimator, studies",
        "--tol",
    ),
    Parameter("seed", "", "seed of the PRNG key", "1", str(SEED), "studies", "--seed"),
    Parameter(
        "sigma",
        "σ",
        "scale of the full value noise",
        "1",
        f"{SIGMA:g}",
        "models, studies",
        "--sigma",
    ),
    Parameter(
        "eps",
        "ε",
        "scale of the scalar (hybrid) value noise",
        "1",
        _grid_defaults("eps"),
        "models, studies",
        "--eps",
    ),
    Parameter(
        "noise",
        "",
        "the value noise added to the attention flow: none, scalar (ε) or matrix (σ); "
        "0.4's full and hybrid still read as matrix and scalar (deprecated); phase-diagram "
        "sets it by --diagram",
        "",
        f"{NOISE} (modes: {STUDY_DEFAULTS['noise']['modes']})",
        "studies",
        "--noise",
    ),
    Parameter(
        "diagram",
        "",
        "the phase diagram: beta-d (β, d; seed 003 Fig. 3), beta-eps (β, ε; Fig. 4) or "
        "beta-n (β, N; Fig. 6); it sets the value noise and the default attention "
        "(0.4's kind, --kind, deprecated)",
        "",
        f"{DIAGRAM} (command line; the study functions take it first, required)",
        "phase-diagram",
        "--diagram",
    ),
    Parameter(
        "attention",
        "",
        "attention normalisation: softmax (SA) or unnormalized (USA); an "
        "Attention object on the models",
        "",
        f"{ATTENTION} (beta-eps: unnormalized)",
        "models, theory, studies",
        "--attention",
    ),
    Parameter(
        "norm",
        "",
        "token normalisation of the scheme: rms or layernorm",
        "",
        NORM,
        "discrete models, studies",
        "--norm",
    ),
    Parameter(
        "scheme",
        "",
        "normalization scheme of the layer maps (post-ln, pre-ln, mix-ln, peri-ln, ngpt, "
        "sqrt-scaling); an object on the models",
        "",
        SCHEME,
        "discrete models, modes, phase-diagram, evolution",
        "--scheme",
    ),
    Parameter(
        "implementation",
        "",
        "how attention is computed: auto (in blocks above 2,048 tokens), dense, blockwise "
        "or library (a JAX attention kernel)",
        "",
        IMPLEMENTATION,
        "Attention, modes",
        "--implementation",
    ),
    Parameter(
        "ell_max",
        "ℓ_max",
        "largest degree of the mode powers P_ℓ",
        "1",
        str(ELL_MAX),
        "modes",
        "--ell-max",
    ),
    Parameter(
        "engine", "", "discrete layer maps or their L → ∞ SDE", "", ENGINE, "studies", "--engine"
    ),
    Parameter(
        "solver",
        "",
        "the SDE engine's solver: euler, heun or spark",
        "",
        SOLVER,
        "SDE engine",
        "--solver",
    ),
    Parameter(
        "tau",
        "τ",
        "Mix-LN's switch: Post-LN before t = τ, Pre-LN after",
        "1 (model time t)",
        f"{TAU:g}",
        "MixLN, schemes, phase-diagram, evolution",
        "--tau",
    ),
    Parameter(
        "alpha",
        "α",
        "nGPT's step",
        "1",
        f"{ALPHA:g} (schemes study: {', '.join(f'{a:g}' for a in SCHEMES_ALPHAS)})",
        "NGPT, schemes, phase-diagram, evolution",
        "--alpha",
    ),
    Parameter(
        "r0", "r0", "radius of the symmetric start", "1", f"{R0:g}", "schemes, theory", "--r0"
    ),
    Parameter("dt", "Δt", "the SDE engine's step", "time", f"{DT:g}", "SDE engine", "--dt"),
    Parameter(
        "on_nonfinite",
        "",
        "trajectories that overflow: raise (stop) or exclude (drop, counted)",
        "",
        ON_NONFINITE,
        "estimator, studies",
        "--on-nonfinite",
    ),
    Parameter(
        "on_merged",
        "",
        "trajectories whose tokens merged numerically: auto, raise, exclude or count",
        "",
        ON_MERGED,
        "estimator, studies",
        "--on-merged",
    ),
    Parameter(
        "early_absorption",
        "δ bound",
        "stop a two-token trajectory once its class can change "
        "only with probability below this bound",
        "1",
        "None (API), auto (CLI)",
        "estimator, studies",
        "--early-absorption",
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "—"


def reference_table() -> str:
    """:data:`PARAMETERS` as the Markdown table of ``docs/reference/parameters.md`` (a test
    checks that the page holds exactly this table)."""
    rows = [
        "| Name | Symbol | Meaning | Unit | Default | Applies to | CLI flag |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in PARAMETERS:
        flag = f"`{p.flag}`" if p.flag else "—"
        cells = [f"`{p.name}`", _cell(p.symbol), _cell(p.meaning), _cell(p.unit)]
        cells += [_cell(p.default), _cell(p.applies), flag]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
