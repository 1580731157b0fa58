"""Early absorption as a wrapper model: a reduced route that stops running the
trajectories whose class can no longer change.

:class:`AbsorbingRoute` holds a route (:class:`.route.AbstractFrameRoute`) and the gaps
(δ₊, δ₋) of :func:`.absorption.absorption_gaps`: every ``absorb_every`` layers it sets aside
the trajectories whose pairs are all within δ₊ of +1 or δ₋ of −1 and runs only the others,
compacted into tiles, so that a chunk's cost follows the trajectories still moving. An
absorbed trajectory keeps its state; by the scale-function bound of :mod:`.absorption` its
class later changes with probability at most the bound asked for. It is what
``route.with_absorption(tol=…, bound=…, dim=…)`` returns where absorption is quantified
(two tokens under Post-LN, :func:`.absorption.absorption_applies`).
"""

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, final, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key

from ..base import AbstractModel, LayerMaps, States, advance_saves, simulate_in_blocks
from .frame import pair_gaps

if TYPE_CHECKING:
    from ..merging import MergeLaw


@runtime_checkable  # the tests' run-time type checks (beartype) ask isinstance of it
class FrameRun(Protocol):
    """What early absorption asks of the route it wraps (a
    :class:`.route.AbstractFrameRoute`, whose ``with_absorption`` builds it): the route's
    model and saves, its blocked simulation and its layers ``[start, stop)`` of a batch. A
    protocol, so that this module needs no import of :mod:`.route`, which imports it."""

    @property
    def model(self) -> LayerMaps: ...
    @property
    def save_times(self) -> np.ndarray: ...
    def merge_law(self, dim: int) -> "MergeLaw | None": ...
    def attention_scale_free(self) -> bool: ...
    def keeps_unit_rows(self) -> bool: ...
    def stepping(self) -> tuple[int, int]: ...
    def begin(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> Any: ...
    def finish(self, state: Any) -> States: ...
    def run(
        self, c: Float[Array, "batch N N"], start: Array, stop: Array, keys: Key[Array, " batch"]
    ) -> Float[Array, "batch N N"]: ...


@final
class AbsorbingRoute(AbstractModel):
    """``route`` with early absorption: the simulation of a batch stops once every
    trajectory's gaps ``1 ∓ z`` are below ``absorb_gap`` = (δ₊, δ₋), checked every
    ``absorb_every`` layers (and at each save), and the remaining saves repeat the
    absorbed state. ``absorb_tile`` live trajectories run side by side (one compiled
    shape); the order in which they run changes no number."""

    route: FrameRun
    absorb_gap: Float[Array, "2"]
    absorb_every: int = eqx.field(static=True, default=50)
    absorb_tile: int = eqx.field(static=True, default=512)

    same_path_in_float64: ClassVar[bool] = True

    @property
    def save_times(self) -> np.ndarray:
        return self.route.save_times

    def merge_law(self, dim: int):
        return self.route.merge_law(dim)

    def attention_scale_free(self) -> bool:
        return self.route.attention_scale_free()

    def keeps_unit_rows(self) -> bool:
        return self.route.keeps_unit_rows()

    @eqx.filter_jit
    def simulate(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> States:
        """A batch of trajectories, one key each, stopping early once all are absorbed."""
        return simulate_in_blocks(self, x0, keys)

    def stepping(self) -> tuple[int, int]:
        # Absorption is checked at multiples of absorb_every (and at each save): blocks end
        # there, so that they check where an uncut run does.
        return self.route.stepping()[0], self.absorb_every

    def begin(self, x0, keys):
        return self.route.begin(x0, keys)

    def advance(self, state, keys, start, stop):
        def run(c, lo, hi, anchor):
            del anchor
            return self._run_absorbing(c, lo, hi, keys)

        c, saves = state
        layers = self.route.model.save_layers
        return advance_saves(layers, c, saves, start, stop, run, lambda c: c)

    def finish(self, state):
        return self.route.finish(state)

    def _absorbed(self, c: Float[Array, "N N"]) -> Array:
        plus, minus = pair_gaps(c)
        n_tokens = c.shape[0]
        pairs = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)
        near = (plus <= self.absorb_gap[0]) | (minus <= self.absorb_gap[1])
        return jnp.all(near | ~pairs)

    def _run_absorbing(
        self, c: Float[Array, "batch N N"], start: Array, stop: Array, keys: Key[Array, " batch"]
    ) -> Float[Array, "batch N N"]:
        """Layers [start, stop), ``absorb_every`` at a time, until every trajectory is
        absorbed; an absorbed trajectory keeps its state (its class can no longer change
        beyond the bound of :mod:`.absorption`).

        Compaction: before each block the live trajectories are moved to the front and only
        they run, in tiles of ``absorb_tile`` (one compiled shape), so the cost follows the
        trajectories still moving. Each trajectory's numbers come from its own key and the
        absolute layer index, so the order in which they run changes nothing.
        """
        absorbed = jax.vmap(self._absorbed)
        batch = c.shape[0]
        tile = min(self.absorb_tile, batch)
        padded = -(-batch // tile) * tile
        # Padding rows copy row 0 and are marked absorbed: they never run, never count.
        c = jnp.concatenate([c, jnp.broadcast_to(c[:1], (padded - batch, *c.shape[1:]))])
        keys = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (padded - batch,))])
        pad = jnp.arange(padded) >= batch

        def cond(state):
            c, n = state
            return (n < stop) & ~jnp.all(absorbed(c) | pad)

        def body(state):
            c, n = state
            # Checks at the multiples of absorb_every (and where a segment starts): the same
            # layers however the run is cut into blocks (see :meth:`stepping`).
            nxt = jnp.minimum((n // self.absorb_every + 1) * self.absorb_every, stop)
            frozen = absorbed(c) | pad
            order = jnp.argsort(frozen, stable=True)  # live trajectories first
            live = jnp.sum(~frozen)
            moved = self._run_tiles(c[order], keys[order], frozen[order], n, nxt, live, tile)
            return c.at[order].set(moved), nxt

        c, _ = jax.lax.while_loop(cond, body, (c, start))
        return c[:batch]

    def _run_tiles(self, c, keys, frozen, n, nxt, live, tile: int) -> Array:
        """Layers [n, nxt) for the first ``live`` rows, ``tile`` rows at a time."""

        def one(i, c):
            first = i * tile
            rows = jax.lax.dynamic_slice_in_dim(c, first, tile)
            ks = jax.lax.dynamic_slice_in_dim(keys, first, tile)
            still = jax.lax.dynamic_slice_in_dim(frozen, first, tile)
            moved = self.route.run(rows, n, nxt, ks)
            rows = jnp.where(still[:, None, None], rows, moved)
            return jax.lax.dynamic_update_slice_in_dim(c, rows, first, 0)

        return jax.lax.fori_loop(0, (live + tile - 1) // tile, one, c)

    def absorption_gaps(self) -> tuple[float, float] | None:
        plus, minus = np.asarray(self.absorb_gap, np.float64).tolist()
        return plus, minus
