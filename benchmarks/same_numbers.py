"""Bit-identical numbers before and after a refactor: record them, then compare.

Usage::

    python benchmarks/same_numbers.py --record FILE [--only PATTERN]
    python benchmarks/same_numbers.py --compare FILE [--only PATTERN] [--rename OLD=NEW ...]

A fixed set of small studies, one per route and engine, runs through the public API (and
the CLI twice): the reduced two-token chain (with and without early absorption), the
reduced frame route (N = 3 < d), the span route (scalar values), the full route (N ≥ d, in
float32 and float64), multi-head attention, the SDE engine (full and hybrid noise; Euler,
Heun and SPaRK), the two-token overlap SDE route, the normalized-attention ODE (every
scheme, Mix-LN included, adaptive and constant-step), the symmetric ODE, the schemes study,
the evolution study and the modes study (no noise, matrix noise, the SDE engine). Each
case gives named arrays (a dataset's data variables and coordinates, or a solution's
fields); ``--record`` writes, per case and array, its dtype, shape and the SHA-256 of its
bytes, plus its values printed in full (``repr`` of each float, exact) where it is small,
or a few of them and its sum, min and max where not.

``--compare`` reruns the cases and prints, per case, what differs: an array whose bytes
changed (with the largest absolute and relative change where its values were stored), one
missing or new. Names may change between the two runs (``tokens`` → ``n_tokens``): an
array is looked up by ``--rename OLD=NEW`` first (applies to every case; repeatable),
then by its own name, then by its bytes (an array with the same bytes under another name
is reported as renamed, not as a change). Case names are this script's own: they do not
depend on the package's vocabulary. Attributes (provenance: seconds, dates, versions) are
not compared. The exit status is 0 when every array is bit-identical (renames allowed),
1 otherwise.

A rename of an API argument (``n_tokens=`` → ``n_tokens=``) needs the call in this script to
follow it, where the old spelling stops working: every call is in one ``case_*`` function.
The whole run costs about 2.5 minutes of CPU (two CLI processes included; 138 s measured
on 2026-11-29 with the modes case, 19 s of it, on a shared 2-core machine), about 1 minute
more with ``--all``.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

import attndyn as ad
from attndyn import studies

#: Arrays with at most this many elements are stored whole (their values, exact).
STORE_MAX = 512
#: Otherwise this many leading values are stored.
HEAD = 8

Arrays = dict[str, np.ndarray]
CASES: dict[str, Callable[[], Arrays]] = {}
#: Cases run only with ``--all`` (tens of seconds of CPU each).
SLOW: set[str] = set()


def case(name: str, *, slow: bool = False):
    def register(fn):
        CASES[name] = fn
        if slow:
            SLOW.add(name)
        return fn

    return register


def arrays_of(obj: Any) -> Arrays:
    """Named numpy arrays of a dataset (data variables and coordinates) or of a module's
    array fields (a solution)."""
    if isinstance(obj, xr.Dataset):
        out = {str(k): np.asarray(v.values) for k, v in obj.data_vars.items()}
        out |= {str(k): np.asarray(v.values) for k, v in obj.coords.items()}
        return out
    out = {}
    for name in getattr(obj, "__dataclass_fields__", {}):
        value = getattr(obj, name)
        if isinstance(value, jax.Array | np.ndarray):
            out[name] = np.asarray(value)
    return out


def merged(**parts: Any) -> Arrays:
    """One case from several results: ``part.name`` for each array of each part."""
    out = {}
    for prefix, obj in parts.items():
        arrays = obj if isinstance(obj, dict) else arrays_of(obj)
        out |= {f"{prefix}.{k}": v for k, v in arrays.items()}
    return out


# --- the cases -------------------------------------------------------------------------


def _mc(**kw) -> "studies.MonteCarlo":
    return studies.MonteCarlo(**{"n_trajectories": 96, "seed": 3, **kw})


@case("phase.reduced_two_token_chain")
def case_two_token_chain() -> Arrays:
    spec = studies.ModelSpec(depth=10, horizon=6.0)
    points = studies.phase_points("beta-d", betas=[0.5, 2.5], dims=[3, 5], n_tokens=[2])
    return arrays_of(studies.phase_diagram_study("beta-d", spec, _mc(), points, progress=False))


@case("phase.reduced_two_token_chain_absorbing")
def case_two_token_absorbing() -> Arrays:
    spec = studies.ModelSpec(depth=10, horizon=30.0)
    points = studies.phase_points("beta-d", betas=[1.0, 3.0], dims=[4], n_tokens=[2])
    mc = _mc(early_absorption=1e-7)
    return arrays_of(studies.phase_diagram_study("beta-d", spec, mc, points, progress=False))


def _estimate(model_fn, points, **kw) -> xr.Dataset:
    return ad.estimate_probabilities(
        model_fn,
        points,
        key=jax.random.key(7),
        n_trajectories=kw.pop("n_trajectories", 64),
        progress=False,
        **kw,
    )


def _discrete(values, *, heads: int = 1):
    def model_fn(beta, dim, n_tokens):
        del dim, n_tokens
        att = ad.Attention(beta, n_heads=heads)
        return ad.DiscreteTransformer(att, values, depth=8, saveat=ad.SaveAt(3.0, (1.0, 3.0)))

    return model_fn


@case("estimate.reduced_frame_route")
def case_frame_route() -> Arrays:
    points = ad.grid(dim=[5], n_tokens=[3], beta=[1.0, 2.0])
    ds = _estimate(_discrete(ad.MatrixValues(1.0)), points, route="reduced")
    return arrays_of(ds)


@case("estimate.span_route")
def case_span_route() -> Arrays:
    points = ad.grid(dim=[5], n_tokens=[3], beta=[1.0])
    values = ad.ScalarValues(0.7, distribution="gaussian")
    return arrays_of(_estimate(_discrete(values), points, route="reduced"))


@case("phase.span_route_hybrid")
def case_span_hybrid() -> Arrays:
    spec = studies.ModelSpec(noise="hybrid", attention="unnormalized", depth=10, horizon=4.0)
    points = studies.phase_points("beta-eps", betas=[1.0], dims=[3], n_tokens=[2], eps=[0.3, 1.2])
    return arrays_of(studies.phase_diagram_study("beta-eps", spec, _mc(), points, progress=False))


@case("estimate.full_route")
def case_full_route() -> Arrays:
    points = ad.grid(dim=[3], n_tokens=[4], beta=[1.0, 3.0])
    return arrays_of(_estimate(_discrete(ad.MatrixValues(1.0)), points))


@case("estimate.full_route_x64")
def case_full_route_x64() -> Arrays:
    points = ad.grid(dim=[3], n_tokens=[3], beta=[2.0])
    return arrays_of(_estimate(_discrete(ad.MatrixValues(1.0)), points, x64=True))


@case("estimate.multihead")
def case_multihead() -> Arrays:
    points = ad.grid(dim=[4], n_tokens=[3], beta=[1.5])
    return arrays_of(_estimate(_discrete(ad.MatrixValues(1.0), heads=2), points))


def _sde_spec(noise: str, solver: str, **kw) -> "studies.ModelSpec":
    return studies.ModelSpec(
        **{"noise": noise, "engine": "sde", "horizon": 1.0, "dt": 0.05, "solver": solver, **kw}
    )


@case("phase.sde_full_euler")
def case_sde_full_euler() -> Arrays:
    points = studies.phase_points("beta-d", betas=[1.0], dims=[3], n_tokens=[3])
    spec = _sde_spec("full", "euler")
    return arrays_of(
        studies.phase_diagram_study("beta-d", spec, _mc(n_trajectories=48), points, progress=False)
    )


def _sde_solutions(model) -> Arrays:
    """A few trajectories of ``model.solve`` (fields of the solution, stacked)."""
    keys = jax.random.split(jax.random.key(11), 4)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=3, dim=3))(keys)
    return arrays_of(jax.vmap(lambda x, k: model.solve(x, key=k))(x0, keys))


def _integrator(solver: str, **kw):
    # The integrator of each SDE case, built where the spelling of its solver may change:
    # a diffrax solver object since 0.5.0, a name before.
    if isinstance(ad.SDEIntegrator().solver, str):
        return ad.SDEIntegrator(solver, **kw)
    obj = {"euler": _diffrax().Euler, "heun": _diffrax().Heun, "spark": _diffrax().SPaRK}
    return ad.SDEIntegrator(obj[solver](), **kw)


@case("solve.sde_solvers")
def case_sde_solvers() -> Arrays:
    parts = {}
    att = ad.Attention(1.2)
    saveat = ad.SaveAt(1.0, (0.5, 1.0))
    for solver in ("euler", "heun", "spark"):
        integrator = _integrator(solver, dt=0.1)
        full = ad.TransformerSDE(att, sigma=0.8, saveat=saveat, integrator=integrator)
        parts[f"full_{solver}"] = _sde_solutions(full)
    # Hybrid noise with Heun: the CLI case below.
    integrator = _integrator("euler", dt=0.1, brownian="virtual")
    hybrid = ad.HybridSDE(att, eps=0.6, saveat=saveat, integrator=integrator)
    parts["hybrid_euler_virtual"] = _sde_solutions(hybrid)
    return merged(**parts)


@case("phase.overlap_sde_route")
def case_overlap_route() -> Arrays:
    points = studies.phase_points("beta-d", betas=[1.0, 3.0], dims=[3], n_tokens=[2])
    # Heun here (the Stratonovich drift); Euler in solve.overlap_sde.
    spec = _sde_spec("full", "heun", horizon=2.0)
    return arrays_of(studies.phase_diagram_study("beta-d", spec, _mc(), points, progress=False))


@case("solve.overlap_sde")
def case_overlap_solve() -> Arrays:
    parts = {}
    z0 = jnp.array([-0.5, 0.1, 0.8])
    keys = jax.random.split(jax.random.key(5), 3)
    # Full noise with Heun: phase.overlap_sde_route.
    for noise, solver in (("full", "euler"), ("hybrid", "heun")):
        model = ad.OverlapSDE(
            2.0,
            noise=noise,
            sigma=0.9,
            eps=0.7,
            saveat=ad.SaveAt(2.0, (1.0, 2.0)),
            integrator=_integrator(solver, dt=0.05),
        )
        sol = jax.vmap(lambda z, k, m=model: m.solve(z, key=k))(z0, keys)
        # ``solve`` returned the array of Z until 0.5.0, a solution (its ``.z``) since.
        parts[f"{noise}_{solver}"] = {"z": np.asarray(getattr(sol, "z", sol))}
    return merged(**parts)


SCHEMES = {
    "post-ln": lambda: ad.PostLN(),
    "pre-ln": lambda: ad.PreLN(),
    "mix-ln": lambda: ad.MixLN(tau=0.75),
    "peri-ln": lambda: ad.PeriLN(),
    "ngpt": lambda: ad.NGPT(alpha=0.7),
    "sqrt-scaling": lambda: ad.SqrtScaling(),
}


def _ode_solve(model, x0, key):
    # Deterministic models take (and ignore) a key once ``solve`` has one signature.
    try:
        return model.solve(x0, key=key)
    except TypeError:
        return model.solve(x0)


@case("solve.ode_schemes")
def case_ode_schemes() -> Arrays:
    parts = {}
    keys = jax.random.split(jax.random.key(2), 2)
    x0 = jax.vmap(lambda k: 1.5 * ad.uniform_sphere(key=k, n_tokens=4, dim=4))(keys)
    saveat = ad.SaveAt(3.0, (0.5, 0.75, 1.5, 3.0))
    for name, scheme in SCHEMES.items():
        model = ad.NormalizedAttentionODE(ad.Attention(1.3), scheme(), saveat=saveat)
        parts[name] = arrays_of(jax.vmap(lambda x, m=model: _ode_solve(m, x, None))(x0))
    # Constant steps (Euler, dt 0.1): a fixed step sequence, Mix-LN's switch included.
    for name in ("mix-ln",):
        integrator = ad.ODEIntegrator(solver=_diffrax().Euler(), adaptive=False, dt0=0.1)
        model = ad.NormalizedAttentionODE(
            ad.Attention(1.3), SCHEMES[name](), saveat=saveat, integrator=integrator
        )
        parts[f"{name}_euler_constant"] = arrays_of(
            jax.vmap(lambda x, m=model: _ode_solve(m, x, None))(x0)
        )
    return merged(**parts)


def _diffrax():
    import diffrax

    return diffrax


@case("estimate.ode", slow=True)
def case_ode_estimate() -> Arrays:
    def model_fn(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.NormalizedAttentionODE(
            ad.Attention(beta), ad.MixLN(tau=0.5), saveat=ad.SaveAt(2.0, (1.0, 2.0))
        )

    points = ad.grid(dim=[3], n_tokens=[3], beta=[2.0])
    return arrays_of(_estimate(model_fn, points, n_trajectories=32))


@case("solve.symmetric_ode")
def case_symmetric() -> Arrays:
    parts = {}
    saveat = ad.SaveAt(4.0, (0.5, 1.0, 2.0, 4.0))
    for name in ("post-ln", "pre-ln", "mix-ln"):
        scheme = SCHEMES[name]
        model = ad.SymmetricODE(scheme(), 2.0, n_tokens=3, r0=1.5, saveat=saveat)
        try:
            sol = model.solve(None, key=None)
        except TypeError:
            sol = model.solve()
        parts[name] = arrays_of(sol)
    return merged(**parts)


@case("study.schemes", slow=True)
def case_schemes() -> Arrays:
    ds = studies.schemes_study(
        schemes=("mix-ln",),
        n_tokens=3,
        dim=4,
        beta=1.0,
        horizon=8.0,
        alphas=(1.0,),
        rw_dim=8,
        rw_n_tokens=4,
        rw_n_layers=6,
        rw_n_trajectories=2,
        progress=False,
    )
    return arrays_of(ds)


@case("study.evolution")
def case_evolution() -> Arrays:
    points = studies.evolution_points(
        ["full", "hybrid", "deterministic"], betas=[1.0], dims=[3], n_tokens=[2], eps=[0.5]
    )
    spec = studies.ModelSpec(depth=8, horizon=3.0)
    ds = studies.evolution_study(spec, _mc(n_trajectories=64), points, saves=4, progress=False)
    return arrays_of(ds)


@case("study.modes")
def case_modes() -> Arrays:
    # The modes study's per-trajectory observables and analysis: test_modes_study's shape
    # (N = 400 on S¹, 3 tiles of 6), matrix noise on S² over two N and two σ (tiles of 8 and
    # 8, a short last tile), and the SDE engine with scalar noise.
    plain = studies.modes_study(
        studies.ModesSpec(horizon=0.2, saves=3),
        studies.ModesRun(n_trajectories=14, ell_max=6),
        studies.modes_points(dims=[2], n_tokens=[400], betas=[9.0]),
        progress=False,
    )
    noisy = studies.modes_study(
        studies.ModesSpec(noise="matrix", horizon=0.5, saves=4, depth=20),
        studies.ModesRun(n_trajectories=10, ell_max=4, seed=2),
        studies.modes_points(
            dims=[3], n_tokens=[32, 64], betas=[4.0], levels=[0, 0.5], level_name="sigma"
        ),
        progress=False,
    )
    sde = studies.modes_study(
        studies.ModesSpec(engine="sde", noise="scalar", horizon=0.3, saves=3, dt=0.05),
        studies.ModesRun(n_trajectories=3, ell_max=3),
        studies.modes_points(dims=[2], n_tokens=[16], betas=[2.0], levels=[0.5], level_name="eps"),
        progress=False,
    )
    return merged(plain=plain, noisy=noisy, sde=sde)


def _cli(*args: str) -> Arrays:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "attndyn.cli", *args, "--out", str(out), "--no-progress"]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stderr[-2000:]}")
        (nc,) = out.glob("*.nc")
        with xr.open_dataset(nc) as ds:
            return arrays_of(ds.load())


@case("cli.phase_diagram_discrete")
def case_cli_discrete() -> Arrays:
    return _cli(
        "phase-diagram", "--beta", "1,2", "--dim", "3", "--n-tokens", "2",
        "--depth", "10", "--horizon", "4", "--n-trajectories", "64",
    )  # fmt: skip


@case("cli.phase_diagram_sde_hybrid_heun")
def case_cli_sde() -> Arrays:
    return _cli(
        "phase-diagram", "--diagram", "beta-eps", "--beta", "1", "--eps", "0.5", "--dim", "3",
        "--n-tokens", "3", "--engine", "sde", "--solver", "heun", "--dt", "0.1", "--horizon",
        "1", "--n-trajectories", "32",
    )  # fmt: skip


# --- record and compare ----------------------------------------------------------------


def _text(x) -> str:
    """A value printed in full: ``repr`` of a Python float round-trips exactly."""
    if isinstance(x, float | np.floating):
        return repr(float(x))
    if isinstance(x, np.generic):
        return repr(x.item())
    return repr(x)


def digest(a: np.ndarray) -> dict[str, Any]:
    """dtype, shape, SHA-256 of the bytes, and the values (all or a few) of one array."""
    if a.dtype.kind in "OUS":
        raw = "\x00".join(map(str, a.ravel().tolist())).encode()
    else:
        raw = np.ascontiguousarray(a).tobytes()
    entry: dict[str, Any] = {
        "dtype": str(a.dtype),
        "shape": list(a.shape),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    flat = a.ravel()
    if flat.size <= STORE_MAX:
        entry["values"] = [_text(v) for v in flat.tolist()]
    else:
        entry["head"] = [_text(v) for v in flat[:HEAD].tolist()]
        if a.dtype.kind in "fiub":
            f = flat.astype(np.float64)
            entry["sum"] = _text(float(np.nansum(f)))
            entry["min"] = _text(float(np.nanmin(f)))
            entry["max"] = _text(float(np.nanmax(f)))
    return entry


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (the CLI)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_cases(pattern: str, *, slow: bool) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    results, seconds = {}, {}
    for name, fn in CASES.items():
        if not fnmatch.fnmatch(name, pattern) or (name in SLOW and not slow):
            continue
        started = cpu_seconds()
        wall = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arrays = fn()
        results[name] = {k: digest(v) for k, v in sorted(arrays.items())}
        seconds[name] = cpu_seconds() - started
        print(
            f"{name:45s} {len(arrays):3d} arrays  {seconds[name]:6.1f} s CPU "
            f"({time.perf_counter() - wall:.1f} s wall)",
            file=sys.stderr,
        )
    return results, seconds


def _floats(entry: Mapping[str, Any]) -> np.ndarray | None:
    if "values" not in entry or (entry["dtype"][0] not in "fiu" and entry["dtype"] != "bool"):
        return None
    try:
        return np.array([float(eval(v)) for v in entry["values"]])  # our own file's reprs
    except (TypeError, ValueError, NameError, SyntaxError):
        return None


def difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """A one-line description of how ``new`` differs from ``old``."""
    if old["dtype"] != new["dtype"] or old["shape"] != new["shape"]:
        return f"{old['dtype']}{old['shape']} -> {new['dtype']}{new['shape']}"
    a, b = _floats(old), _floats(new)
    if a is None or b is None:
        parts = [f"{k} {old.get(k)} -> {new.get(k)}" for k in ("sum", "min", "max")]
        return "bytes differ; " + ", ".join(p for p in parts if "None" not in p)
    both = np.isfinite(a) & np.isfinite(b)
    nan_changed = int(np.sum(np.isnan(a) != np.isnan(b)))
    diff = np.abs(a - b)[both]
    scale = np.maximum(np.abs(a), np.abs(b))[both]
    rel = np.divide(diff, scale, out=np.zeros_like(diff), where=scale > 0)
    n = int(np.sum(diff > 0))
    return (
        f"{n} of {a.size} values differ: max |Δ| = {diff.max(initial=0):.3g}, "
        f"max |Δ|/|x| = {rel.max(initial=0):.3g}"
        + (f", {nan_changed} NaN changed" if nan_changed else "")
    )


def compare_case(
    old: Mapping[str, Any], new: Mapping[str, Any], renames: Mapping[str, str]
) -> list[str]:
    lines, used = [], set()
    by_hash: dict[str, list[str]] = {}
    for k, v in new.items():
        by_hash.setdefault(v["sha256"], []).append(k)
    for name, entry in old.items():
        target = renames.get(name, name)
        for part_old, part_new in renames.items():  # a rename of a part ("x.tokens")
            if name.endswith("." + part_old):
                target = name[: -len(part_old)] + part_new
        if target in new and new[target]["sha256"] == entry["sha256"]:
            used.add(target)
            continue
        same = [k for k in by_hash.get(entry["sha256"], []) if k not in used and k not in old]
        if same and (target not in new or target in old):
            used.add(same[0])
            lines.append(f"  renamed {name} -> {same[0]} (bytes identical)")
            continue
        if target in new:
            used.add(target)
            lines.append(f"  CHANGED {name}: {difference(entry, new[target])}")
        else:
            lines.append(f"  MISSING {name}")
    for name in new:
        if name not in used and name not in old:
            lines.append(f"  NEW {name}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--record", type=Path, metavar="FILE")
    mode.add_argument("--compare", type=Path, metavar="FILE")
    parser.add_argument("--only", default="*", metavar="PATTERN", help="fnmatch on case names")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW")
    parser.add_argument("--all", action="store_true", help="also the slow cases (+1 min CPU)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(n + (" (slow: --all)" if n in SLOW else "") for n in CASES))
        return 0
    if not (args.record or args.compare):
        parser.error("give --record FILE or --compare FILE (or --list)")
    results, seconds = run_cases(args.only, slow=args.all)
    print(
        f"cases: {sum(seconds.values()):.1f} s CPU; whole process so far: {cpu_seconds():.1f} s",
        file=sys.stderr,
    )
    if args.record:
        record = {
            "about": "benchmarks/same_numbers.py --record: per case and array: dtype, shape, "
            "sha256, values",
            "jax": jax.__version__,
            "attndyn": ad.__version__,
            "cases": results,
        }
        args.record.write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded {len(results)} cases in {args.record}")
        return 0
    renames = dict(r.split("=", 1) for r in args.rename)
    before = json.loads(args.compare.read_text())["cases"]
    differ = False
    for name, new in results.items():
        if name not in before:
            print(f"{name}: NEW CASE (not in {args.compare})")
            continue
        lines = compare_case(before[name], new, renames)
        changed = any(not line.startswith("  renamed") for line in lines)
        differ |= changed
        status = "DIFFERS" if changed else "identical" + (" (renames)" if lines else "")
        print(f"{name}: {status}")
        for line in lines:
            print(line)
    missing = [
        n
        for n in before
        if n not in results and fnmatch.fnmatch(n, args.only) and (n not in SLOW or args.all)
    ]
    for name in missing:
        print(f"{name}: NOT RUN (in {args.compare}, no longer a case)")
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
