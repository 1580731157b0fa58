"""What a run leaves on disk and how it talks to its environment, apart from the
estimation it serves: atomic files and locks (``files``), CF metadata and the provenance
of every dataset (``metadata``), the runtime's settings and compilation cache
(``runtime``), Ctrl-C (``interrupts``) and several processes (``distributed``).

The estimator (:mod:`attndyn._estimate`), the studies and the command line import it; it
imports only :mod:`attndyn._core`.
"""
