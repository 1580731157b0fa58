"""Mix-LN's switch in the normalized-attention ODE: one solve per phase (what attndyn does)
against one solve with diffrax's ``ClipStepSizeController(jump_ts=[τ])``.

Usage: ``python benchmarks/mixln_jumps.py [--batch B] [--n-tokens N] [--dim D] [--tau TAU]``.

Both routes solve the same batch (adaptive Tsit5, rtol 1e-6, atol 1e-8, T = 3, 31 saves):

- ``pieces``: :meth:`attndyn.ODEIntegrator.solve_scheme`, Post-LN's field on [0, τ] and
  Pre-LN's on [τ, T], two ``diffeqsolve`` calls (the numbers of attndyn ≤ 0.4);
- ``jump_ts``: Mix-LN's own field (``t < τ`` selects the factors) in one ``diffeqsolve``
  whose PID controller is wrapped in ``ClipStepSizeController(jump_ts=[τ])``: it steps to
  the float below τ and on from the float above it, carrying its step size across.

Printed per route: the compile seconds, the steady-state seconds (best of 9 calls, the
routes called in turn), the mean number of accepted steps, and the largest difference of
the saved θ and r between the routes (the rounding the jump route moves them by).
"""

import argparse
import json
import math
import time

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

import attndyn as ad
from attndyn._models import ode as ode_module


def pieces(model):
    def one(x0):
        sol = model.solve(x0)
        return sol.theta, sol.r, sol.num_steps

    return one


def jump_ts(model):
    integ = model.integrator

    def one(x0):
        dtype = x0.dtype
        ts = jnp.asarray(model.save_times, dtype)
        r0 = jnp.linalg.norm(x0, axis=-1)
        y0 = (x0 / r0[:, None], model.scheme.start_radius(r0))
        tau = model.scheme.tau.astype(dtype)
        controller = dfx.ClipStepSizeController(
            dfx.PIDController(rtol=integ.rtol, atol=integ.atol), jump_ts=tau[None]
        )
        sol = dfx.diffeqsolve(
            dfx.ODETerm(ode_module._field), integ.solver, ts[0], ts[-1], None, y0,
            (model, model.scheme), saveat=dfx.SaveAt(ts=ts), stepsize_controller=controller,
            max_steps=integ.max_steps,
        )  # fmt: skip
        assert sol.ys is not None and sol.stats is not None
        theta, r = sol.ys
        norms = jnp.linalg.norm(theta, axis=-1, keepdims=True)
        return theta / norms, r, sol.stats["num_accepted_steps"]

    return one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--n-tokens", type=int, default=8)
    parser.add_argument("--dim", type=int, default=4)
    parser.add_argument("--tau", type=float, default=0.75)
    args = parser.parse_args()
    keys = jax.random.split(jax.random.key(0), args.batch)
    x0 = jax.vmap(lambda k: 1.5 * ad.uniform_sphere(key=k, n_tokens=args.n_tokens, dim=args.dim))(
        keys
    )
    saveat = ad.SaveAt(3.0, tuple(np.linspace(0.0, 3.0, 31).tolist()))
    model = ad.NormalizedAttentionODE(ad.Attention(1.3), ad.MixLN(tau=args.tau), saveat=saveat)
    routes = {"pieces": pieces(model), "jump_ts": jump_ts(model)}
    compiled, out, row = {}, {}, {"batch": args.batch, "N": args.n_tokens, "d": args.dim}
    row["tau"] = args.tau
    for name, one in routes.items():
        started = time.perf_counter()
        compiled[name] = jax.jit(jax.vmap(one)).lower(x0).compile()
        row[f"{name}_compile_s"] = round(time.perf_counter() - started, 2)
        out[name] = jax.block_until_ready(compiled[name](x0))
        row[f"{name}_steps"] = round(float(jnp.mean(out[name][2])), 2)
    best = dict.fromkeys(routes, math.inf)
    for _ in range(9):
        for name in routes:
            started = time.perf_counter()
            jax.block_until_ready(compiled[name](x0))
            best[name] = min(best[name], time.perf_counter() - started)
    for name in routes:
        row[f"{name}_s"] = round(best[name], 4)
    (theta_p, r_p, _), (theta_j, r_j, _) = out["pieces"], out["jump_ts"]
    row["max_abs_diff_theta"] = float(jnp.max(jnp.abs(theta_p - theta_j)))
    row["max_abs_diff_r"] = float(jnp.max(jnp.abs(r_p - r_j)))
    row["max_rel_diff_r"] = float(jnp.max(jnp.abs(r_p - r_j) / jnp.abs(r_p)))
    row["device"] = jax.devices()[0].device_kind
    print(json.dumps(row))


if __name__ == "__main__":
    main()
