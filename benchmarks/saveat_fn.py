"""Observe inside the solve (``diffrax.SaveAt(ts, fn=…)``) or save the states and observe
after: time and memory, for the ODE and the SDE as the estimator runs them.

Usage: ``python benchmarks/saveat_fn.py [--batch B] [--n-tokens N] [--dim D] [--saves S]``.

Both routes run the same solve of a batch of trajectories and compute the same observables
(classes, mean cosine and pair density of every save, :func:`attndyn.pair_observables`):

- ``states``: what attndyn does: ``SaveAt(ts)`` keeps the ``(batch, S, N, d)`` states,
  observed after the solve in the same compiled program;
- ``fn``: ``SaveAt(ts, fn=observe)`` evaluates the observables at each save time inside
  the solve and keeps only them.

Printed per model and route: the steady-state seconds (best of 9 calls, compiled once,
the two routes called in turn), and the compiled program's temporary and output bytes
(XLA's ``memory_analysis``), with the ratios fn/states; and whether the two routes give
bit-identical observables (where not: how many trajectory-saves change class, and the
largest change of each mean).
"""

import argparse
import json
import math
import time

import diffrax as dfx
import jax
import jax.numpy as jnp

import attndyn as ad
from attndyn._models import ode as ode_module
from attndyn._models.integrators import _diffusion, _ito_drift


def observe(x):
    """The observables of one save (the estimator's, without the span dimension)."""
    obs = ad.pair_observables(x, 1e-3)
    return obs.classes, obs.mean_cosine, obs.pair_density


def _ode_parts(model, x0):
    theta = ad.normalize(x0)
    y0 = (theta, jnp.ones(x0.shape[0], x0.dtype))
    ts = jnp.asarray(model.save_times, x0.dtype)
    return dfx.ODETerm(ode_module._field), y0, ts


def ode_route(model, fn: bool):
    integ = model.integrator

    def one(x0, key):
        del key
        term, y0, ts = _ode_parts(model, x0)
        save = dfx.SaveAt(ts=ts, fn=lambda t, y, args: observe(y[0])) if fn else dfx.SaveAt(ts=ts)
        sol = dfx.diffeqsolve(
            term, integ.solver, ts[0], ts[-1], None, y0, (model, model.scheme), saveat=save,
            stepsize_controller=dfx.PIDController(rtol=integ.rtol, atol=integ.atol),
            max_steps=integ.max_steps,
        )  # fmt: skip
        assert sol.ys is not None
        if fn:
            return sol.ys
        return jax.vmap(observe)(sol.ys[0])

    return one


def sde_route(model, fn: bool):
    integ = model.integrator

    def one(x0, key):
        dtype = x0.dtype
        horizon = model.saveat.horizon
        shape = jax.ShapeDtypeStruct(model.brownian_shape(x0), dtype)
        path = integ.brownian_path(key, shape, horizon)
        terms = dfx.MultiTerm(dfx.ODETerm(_ito_drift), dfx.ControlTerm(_diffusion, path))
        ts = jnp.asarray(model.save_times, dtype)
        save = dfx.SaveAt(ts=ts, fn=lambda t, y, args: observe(y)) if fn else dfx.SaveAt(ts=ts)
        sol = dfx.diffeqsolve(
            terms, integ.diffrax_solver(), jnp.zeros((), dtype), jnp.asarray(horizon, dtype),
            jnp.asarray(integ.step_size(horizon), dtype), ad.normalize(x0), model, saveat=save,
            stepsize_controller=dfx.ConstantStepSize(), max_steps=integ.n_steps(horizon) + 2,
            adjoint=dfx.ForwardMode(),
        )  # fmt: skip
        if fn:
            return sol.ys
        return jax.vmap(observe)(sol.ys)

    return one


def measure(routes: dict, x0, keys, repeats: int) -> dict[str, dict]:
    """Compile each route once, then time them in turn (``repeats`` rounds, alternating,
    so that a busy machine slows both alike) and keep each one's best time."""
    compiled, out = {}, {}
    for name, one in routes.items():
        compiled[name] = jax.jit(jax.vmap(one)).lower(x0, keys).compile()
        out[name] = {"out": jax.block_until_ready(compiled[name](x0, keys))}
        memory = compiled[name].memory_analysis()
        out[name]["temp_mb"] = memory.temp_size_in_bytes / 2**20
        out[name]["output_mb"] = memory.output_size_in_bytes / 2**20
        out[name]["seconds"] = math.inf
    for _ in range(repeats):
        for name in routes:
            started = time.perf_counter()
            jax.block_until_ready(compiled[name](x0, keys))
            seconds = time.perf_counter() - started
            out[name]["seconds"] = min(out[name]["seconds"], seconds)
    return out


def differences(states, inside) -> dict:
    """Whether the two routes' observables are bit-identical, and where not: the classes
    that differ (of all trajectory-saves) and the largest change of each float."""
    names = ("classes", "mean_cosine", "pair_density")
    out: dict = {"same_observables": True}
    for name, a, c in zip(names, states, inside, strict=True):
        if bool(jnp.array_equal(a, c, equal_nan=True)):
            continue
        out["same_observables"] = False
        if a.dtype == bool:
            rows = jnp.any(a != c, axis=-1)
            out["classes_differ"] = f"{int(rows.sum())} of {rows.size}"
        else:
            out[f"{name}_max_abs_diff"] = float(jnp.nanmax(jnp.abs(a - c)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--n-tokens", type=int, default=16)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--saves", type=int, default=51)
    args = parser.parse_args()
    n, d, b, s = args.n_tokens, args.dim, args.batch, args.saves
    keys = jax.random.split(jax.random.key(0), b)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=n, dim=d))(keys)
    saveat = ad.SaveAt(2.0, tuple(jnp.linspace(0.0, 2.0, s).tolist()))
    models = {
        "ode (Tsit5, adaptive)": (
            ad.NormalizedAttentionODE(ad.Attention(1.0), ad.PostLN(), saveat=saveat),
            ode_route,
        ),
        "sde (Euler, dt 0.01)": (
            ad.TransformerSDE(
                ad.Attention(1.0), saveat=saveat, integrator=ad.SDEIntegrator(dfx.Euler(), 0.01)
            ),
            sde_route,
        ),
    }
    for name, (model, route) in models.items():
        both = measure({"states": route(model, False), "fn": route(model, True)}, x0, keys, 9)
        states, inside = both["states"], both["fn"]
        row = {"model": name, "batch": b, "N": n, "d": d, "saves": s}
        row |= differences(states["out"], inside["out"])
        for key in ("seconds", "temp_mb", "output_mb"):
            row[f"states_{key}"] = round(states[key], 4)
            row[f"fn_{key}"] = round(inside[key], 4)
            row[f"fn/states_{key}"] = round(inside[key] / max(states[key], 1e-12), 3)
        row["device"] = jax.devices()[0].device_kind
        print(json.dumps(row))


if __name__ == "__main__":
    main()
