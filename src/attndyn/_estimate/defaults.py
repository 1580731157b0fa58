"""Defaults of the estimator that the command line shows in its help, in a module that
imports nothing (the CLI declares its options without importing JAX)."""

#: Seconds every process waits for the coordinator and all the processes to join.
DEFAULT_COORDINATOR_TIMEOUT = 120
