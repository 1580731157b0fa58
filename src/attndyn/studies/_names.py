"""The names of the studies' choices, in a module that imports nothing: the command line
declares its options with them without importing JAX. The defaults are
:mod:`attndyn._core.defaults`'s (the one place that holds each)."""

from .._core import defaults
from .._core.names import NOISE_NAMES

#: The phase diagrams of seed 003: (β, d) Fig. 3, (β, ε) Fig. 4, (β, N) Fig. 6 (0.4 called a
#: diagram a phase diagram's "kind").
DIAGRAMS = ("beta-d", "beta-eps", "beta-n")
#: The value noise each diagram is defined for: the exact curves of ``beta-d`` and
#: ``beta-eps`` hold for these models only.
NOISE_OF_DIAGRAM = {"beta-d": "matrix", "beta-eps": "scalar", "beta-n": "matrix"}
#: The discrete layer maps or their L → ∞ SDE.
ENGINES = ("discrete", "sde")
#: The modes study's engines: the particles' two and the mean-field equation of N → ∞.
MODES_ENGINES = (*ENGINES, "mean-field")
#: The attention each diagram uses unless said otherwise. Fig. 4 tests Prop. 1, which
#: holds for unnormalised attention (ε_c = √(2·exp(−β))); Figs. 3 and 6 use softmax.
DEFAULT_ATTENTION = {
    diagram: defaults.STUDY_DEFAULTS["attention"].get(diagram, defaults.ATTENTION)
    for diagram in DIAGRAMS
}
#: The modes command's name of :data:`attndyn._core.names.NOISE_NAMES` (cli/_modes.py
#: imports it under this name; the same tuple).
MODES_NOISES = NOISE_NAMES
