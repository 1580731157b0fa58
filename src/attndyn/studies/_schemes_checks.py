"""What the schemes study refuses before anything is solved, in closed form: its
arguments' ranges, and what the study would otherwise find only mid-run (a terminal-rate
fit that cannot start by t = 10⁷, a start radius or a Mix-LN switch float32 cannot hold,
an explicit solve too stiff for its horizon), each refusal naming the values allowed.
:func:`attndyn.studies.schemes.schemes_study` and ``attndyn schemes`` call these first."""

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from .._core.errors import (
    INT32_MAX,
    ParameterError,
    check_bound,
    check_choice,
    check_int,
    check_real,
    check_seed,
    check_sequence,
    check_unique,
)
from .._core.renamed import renamed
from .._core.schemes import SCHEME_NAMES, AbstractScheme, scheme_from_name
from .._models.integrators import ODEIntegrator
from .._models.symmetric import check_fits
from ..theory._symmetric import time_to_gap


def _schemes(names: Sequence[str], *, tau: float, alpha: float) -> list[AbstractScheme]:
    """The scheme objects of ``names`` (Mix-LN with ``tau``, nGPT with ``alpha``)."""
    return [scheme_from_name(name, tau=tau, alpha=alpha) for name in names]


#: The terminal-rate fit starts where 1 − γ first falls to FIT_GAP, which must happen by
#: t = FIT_HORIZON: refused up front otherwise (:func:`check_schemes_start`).
FIT_GAP = 1e-2
FIT_HORIZON = 1e7


#: Largest n and d of the symmetric start, and of the random-weight stacks.
MAX_SIZE = 2**14


def _check_arguments(
    schemes, *, n_tokens, dim, beta, horizon, alphas, tau, r0, seed, rw_dim, rw_n_tokens, rw_beta,
    rw_n_layers, rw_n_trajectories,
):  # fmt: skip
    """Every argument of :func:`schemes_study`, then :func:`check_schemes_start`."""
    check_sequence("schemes", schemes)
    if len(schemes) == 0:
        raise ParameterError("schemes must name at least one scheme.")
    for name in schemes:
        check_choice("scheme", name, SCHEME_NAMES)
    check_unique("schemes", schemes)  # the CLI refuses them too: two rows of one name
    check_int("n_tokens", n_tokens, lower=2, upper=MAX_SIZE)
    check_int("dim", dim, lower=2, upper=MAX_SIZE)
    check_seed("seed", seed)
    for name, value in (("beta", beta), ("horizon", horizon), ("tau", tau), ("r0", r0)):
        check_real(name, value)
    check_bound("beta", beta, lower=0.0)
    check_bound("horizon", horizon, lower=0.0, lower_open=True)
    check_bound("tau", tau, lower=0.0)
    check_bound("r0", r0, lower=0.0, lower_open=True)
    check_sequence("alphas", alphas)
    if len(alphas) == 0:
        raise ParameterError("alpha must name at least one value.")
    for alpha in alphas:
        check_real("alpha", alpha)
    check_bound("alpha", np.asarray(alphas), lower=0.0, lower_open=True)
    check_unique("alphas", alphas)  # one nGPT curve per α: a repeat is a duplicate coordinate
    check_int("rw_n_layers", rw_n_layers, lower=1, upper=INT32_MAX)
    check_int("rw_n_trajectories", rw_n_trajectories, lower=1, upper=INT32_MAX)
    check_int("rw_dim", rw_dim, lower=2, upper=MAX_SIZE)
    check_int("rw_n_tokens", rw_n_tokens, lower=2, upper=MAX_SIZE)
    if rw_beta is not None:
        check_real("rw_beta", rw_beta)
        check_bound("rw_beta", rw_beta, lower=0.0)
    check_horizon_steps(horizon, alphas)
    alpha = float(alphas[0])
    check_schemes_start(schemes, n_tokens=n_tokens, dim=dim, beta=beta, alpha=alpha, tau=tau, r0=r0)


#: Steps per unit time the explicit ODE solver takes once the tokens cluster under Post-LN
#: (and nGPT at α = 1; α times more at α): the clustered state is stiff. Measured 0.25-0.32
#: at 6,000 time units for N = 2-32, d = 3-32, β = 0-10 (Tsit5 at rtol 1e-6).
STIFF_STEPS_PER_TIME = 0.35


def check_horizon_steps(horizon: float, alphas: Sequence[float], prefix: str = "") -> None:
    """Refuse, before any solve, a horizon the γ(t) solves cannot reach within their step
    budget (``max_steps`` of :class:`ODEIntegrator`): about
    :data:`STIFF_STEPS_PER_TIME`·max(1, α)·horizon steps (a horizon of 10³⁰⁰ was solved for
    tens of seconds, then refused)."""
    budget = ODEIntegrator().max_steps
    rate = STIFF_STEPS_PER_TIME * max(1.0, *(float(a) for a in alphas))
    limit = 0.9 * budget / rate
    if float(horizon) > limit:
        raise ParameterError(
            f"{prefix}horizon={float(horizon):g} would take the ODE solver about "
            f"{rate * float(horizon):.3g} steps (about {rate:.2g} per unit time once the tokens "
            f"cluster), more than its budget of {budget}: give {prefix}horizon <= {limit:.3g} "
            "(the γ(t) curves have long converged by then)."
        )


#: The largest Mix-LN switch time τ: the largest float32 (the scheme's τ is a float32 leaf).
TAU_MAX = float(np.finfo(np.float32).max)


#: The start radius r0 as the full ODE holds it: r0·e_i in float32, divided by its norm,
#: so r0² must be a normal float32 (2**-126 ≤ r0² < 2**128).
R0_RANGE = (2.0**-63, 2.0**64)


@renamed(tokens="n_tokens")
def check_schemes_start(
    schemes: Sequence[str], *, n_tokens, dim, beta, alpha, tau, r0, prefix: str = ""
) -> None:
    """Refuse, before anything is solved, what the study would only find mid-run.

    - a start radius outside :data:`R0_RANGE` (its square underflows or overflows float32);
    - a scheme whose 1 − γ falls to :data:`FIT_GAP` (where its terminal-rate fit starts)
      only after :data:`FIT_HORIZON`, from the closed form
      :func:`attndyn.theory._symmetric.time_to_gap`. The message gives the allowed
      values of beta (the time grows with β for every scheme), r0 (Pre-, Peri-LN, Mix-LN
      at τ = 0: the time is proportional to r0), nGPT's alpha (inversely proportional) and
      Mix-LN's tau (the time falls as τ grows).

    ``alpha`` is nGPT's α in the scheme table (the study's ``alphas[0]``); ``prefix`` is
    put before every parameter name (``"--"``: the CLI's options).
    """
    p = prefix
    check_int(p + ("n-tokens" if p else "n_tokens"), n_tokens, lower=2, upper=MAX_SIZE)
    check_int(p + "dim", dim, lower=2, upper=MAX_SIZE)
    check_fits(n_tokens, dim)
    for name, value in (("beta", beta), ("tau", tau), ("r0", r0), ("alpha", alpha)):
        check_real(p + name, value)
    check_bound(p + "beta", beta, lower=0.0)
    check_bound(p + "tau", tau, lower=0.0)
    check_bound(p + "r0", r0, lower=0.0, lower_open=True)
    check_bound(p + "alpha", alpha, lower=0.0, lower_open=True)
    beta, tau, r0, alpha = float(beta), float(tau), float(r0), float(alpha)
    if tau > TAU_MAX:  # Mix-LN's τ is a float32 leaf: its own check would see (and show) inf
        raise ParameterError(
            f"{p}tau={_short(tau, 6)} is outside the allowed range [0, {_short(TAU_MAX, 6)}]: "
            "Mix-LN holds τ in float32 (any τ at or beyond the horizon is Post-LN throughout)."
        )
    with np.errstate(over="ignore"):
        held = float(np.float32(r0))
    if not R0_RANGE[0] <= held < R0_RANGE[1]:
        raise ParameterError(
            f"{p}r0={_short(r0, 6)} is outside the allowed range [2**-63, 2**64) ≈ [1.0842e-19, "
            "1.8447e19): the full ODE holds the start r0·e_i in float32, where r0² must be "
            "a normal number."
        )
    starts = [
        (s, _fit_start(s, beta=beta, n_tokens=n_tokens, r0=r0))
        for s in _schemes(schemes, tau=tau, alpha=alpha)
    ]
    late = [(scheme, t) for scheme, t in starts if not t <= FIT_HORIZON]
    if late:
        raise ParameterError(_late_start(late, beta=beta, n_tokens=n_tokens, r0=r0, p=p))


def _fit_start(scheme: AbstractScheme, *, beta: float, n_tokens: int, r0: float) -> float:
    return time_to_gap(scheme, beta=beta, n_tokens=n_tokens, r0=r0, gap=FIT_GAP)


def _late_start(late, *, beta, n_tokens, r0, p: str) -> str:
    """The one line of :func:`check_schemes_start` for the schemes whose fit would start
    too late (``late``: (scheme, time) pairs): the values that matter, and those of one
    parameter at which every one of them starts in time."""
    bounds = [_bounds(scheme, t, beta=beta, n_tokens=n_tokens, r0=r0) for scheme, t in late]
    shown = {"beta": beta, "n_tokens": n_tokens, "r0": r0}
    for scheme, _ in late:
        shown |= scheme.parameters  # nGPT's alpha, Mix-LN's tau
    if not any(_uses_r0(scheme) for scheme, _ in late):
        del shown["r0"]
    label = {k: p + (k.replace("_", "-") if p else k) for k in shown} | {
        "alpha": p + "alpha" if p else "alphas[0]"
    }
    allowed = []
    for key in ("beta", "r0", "alpha", "tau"):
        if all(key in b for b in bounds):
            side = bounds[0][key][0]
            value = (max if side == "≥" else min)(b[key][1] for b in bounds)
            allowed.append(f"{label[key]} {side} {_rounded(value, up=side == '≥')}")
    names = ", ".join(scheme.name for scheme, _ in late[:-1])
    names = f"{names} and {late[-1][0].name}" if names else late[-1][0].name
    times = ", ".join(
        f"t {'≈ ' + _short(t) if math.isfinite(t) else '> 1e308'}"
        + (f" ({scheme.name})" if len(late) > 1 else "")
        for scheme, t in late
    )
    values = ", ".join(f"{label[k]}={_short(v, 6)}" for k, v in shown.items())
    return (
        f"{names} at {values}: 1 − γ falls to {_short(FIT_GAP)}, where the terminal-rate "
        f"fit starts, only at {times}, after t = {_short(FIT_HORIZON)}; allowed: "
        f"{''.join(a + ', or ' for a in allowed)}leaving {names} out of {p}schemes."
    )


def _uses_r0(scheme: AbstractScheme) -> bool:
    """Whether the scheme's reduced ODE starts from r0 (the others start from r = 1): its
    first speed law has a growing radius (Pre-, Peri-LN, Mix-LN at τ = 0)."""
    laws = scheme.speed_laws()
    return laws is not None and laws[0][1].radius


def _bounds(scheme, t: float, *, beta, n_tokens, r0) -> dict[str, tuple[str, float]]:
    """The values of each parameter at which ``scheme``'s fit starts by FIT_HORIZON, the
    others as given: {name: ("≤" or "≥", bound)}."""

    def late(**change) -> bool:
        kw = {"scheme": scheme, "beta": beta, "n_tokens": n_tokens, "r0": r0, **change}
        return not _fit_start(kw.pop("scheme"), **kw) <= FIT_HORIZON

    out = {}
    if not late(beta=0.0):  # the time grows with β
        out["beta"] = ("≤", _bisect(lambda b: late(beta=b), 0.0, beta))
    if _uses_r0(scheme) and r0 * FIT_HORIZON / t >= R0_RANGE[0]:
        out["r0"] = ("≤", r0 * FIT_HORIZON / t)  # the time is proportional to r0
    params = scheme.parameters
    if "alpha" in params and math.isfinite(t):
        out["alpha"] = ("≥", params["alpha"] * t / FIT_HORIZON)  # nGPT's s = |A|/α: ... to 1/α
    if "tau" in params:
        # Mix-LN: the time falls as τ grows, down to its Post-LN stretch's alone, which is
        # the time at τ = FIT_HORIZON whenever that one is in time (bit for bit: the same
        # quadrature), and later than FIT_HORIZON otherwise.
        post = _fit_start(_replace(scheme, tau=FIT_HORIZON), beta=beta, n_tokens=n_tokens, r0=r0)
        if post <= FIT_HORIZON:

            def late_at(tau: float) -> bool:
                return late(scheme=_replace(scheme, tau=tau))

            out["tau"] = ("≥", _bisect(late_at, post, params["tau"]))
    return out


def _replace(scheme: AbstractScheme, **parameters: float) -> AbstractScheme:
    """``scheme`` with some of its :attr:`~AbstractScheme.parameters` changed."""
    return dataclasses.replace(scheme, **parameters)


def _short(value: float | int, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, exponents without '+' or leading zeros."""
    text = f"{value:.{digits}g}"
    return text.replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _bisect(late: Callable[[float], bool], ok: float, bad: float) -> float:
    """The boundary between ``ok`` (in time) and ``bad`` (too late) to 1e-4 relative, from
    the ``ok`` side; geometric steps across a wide range."""
    for _ in range(60):
        if abs(ok - bad) <= 1e-4 * abs(ok):
            break
        lo, hi = sorted((ok, bad))
        mid = math.sqrt(lo * hi) if lo > 0 and hi > 4 * lo else (lo + hi) / 2
        if late(mid):
            bad = mid
        else:
            ok = mid
    return ok


def _rounded(value: float, *, up: bool) -> str:
    """``value`` to 3 significant digits, rounded towards the allowed side."""
    if value == 0:
        return "0"
    scale = 10.0 ** (math.floor(math.log10(abs(value))) - 2)
    return _short((math.ceil if up else math.floor)(value / scale) * scale)
