"""The interface every simulated model offers to the observables and estimators."""

import abc

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray


class AbstractDynamics(eqx.Module):
    """A model of N tokens in R^d, simulated one trajectory at a time.

    Subclasses implement :meth:`trajectory` for a single initial condition shaped
    ``(N, d)``; batching is ``jax.vmap`` over keys and initial conditions.
    """

    @property
    @abc.abstractmethod
    def save_times(self) -> np.ndarray:
        """The times (in units of t = n/L) at which :meth:`trajectory` records the state."""

    @abc.abstractmethod
    def trajectory(
        self, x0: Float[Array, "N d"], *, key: PRNGKeyArray
    ) -> Float[Array, "n_saves N d"]:
        """The state at each of :attr:`save_times`, starting from ``x0`` at t = 0."""
