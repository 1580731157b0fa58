"""The estimator's command-line default, read from its one place (:mod:`attndyn._core.defaults`),
for ``attndyn modes`` until it takes the shared multi-host options."""

from .._core.defaults import COORDINATOR_TIMEOUT

#: Seconds every process waits for the coordinator and all the processes to join.
DEFAULT_COORDINATOR_TIMEOUT = COORDINATOR_TIMEOUT
