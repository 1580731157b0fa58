"""``attndyn schemes`` refuses, before any solve, what it used to find mid-run.

The terminal-rate fit starts where 1 − γ first falls to 1e-2 and needs that by t = 1e7;
`schemes --beta 12` computed for 10 s and then said pre-ln never gets there. The time is
now a closed form (:func:`attndyn.theory._symmetric.time_to_gap`, a quadrature of the
reduced ODE of Thm 4.1), checked up front with the allowed values of beta, r0, alpha and
tau in the message; so is a start radius whose square float32 cannot hold.
"""

import math
import re
from typing import Any

import jax
import numpy as np
import pytest
from click.testing import CliRunner

from attndyn import NGPT, SCHEME_NAMES, MixLN, ParameterError, PostLN, SaveAt, scheme_from_name
from attndyn._core import defaults as schemes_defaults
from attndyn._models.integrators import ODEIntegrator
from attndyn._models.symmetric import SymmetricODE
from attndyn.cli import _schemes, main
from attndyn.studies import schemes
from attndyn.theory._symmetric import time_to_gap

SMALL = ["--n-tokens", "4", "--dim", "5", "--rw-n-layers", "2", "--rw-n-trajectories", "1"]
SMALL += ["--no-progress"]


class Reached(Exception):
    """Raised by the stand-ins: the command or study got past its checks."""


def _reached(*args, **kwargs):
    raise Reached


# --- the closed form --------------------------------------------------------------------------


@pytest.mark.default_case("peri-ln-5.0-1000-2.0")
@pytest.mark.parametrize(
    ("scheme", "beta", "n", "r0"),
    [
        (PostLN(), 12.0, 2, 1.0),  # the metastable plateau: t ≈ 6.9e3
        (scheme_from_name("pre-ln"), 5.0, 32, 0.3),
        (scheme_from_name("peri-ln"), 5.0, 1000, 2.0),
        (NGPT(alpha=0.7), 9.0, 100, 1.0),
        (scheme_from_name("sqrt-scaling"), 7.0, 1000, 1.0),
        (MixLN(tau=0.5), 5.0, 32, 1.0),  # switches to Pre-LN before the gap is reached
        (MixLN(tau=0.0), 4.0, 32, 3.0),  # Pre-LN from r0
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_time_to_gap_is_where_the_reduced_ode_reaches_the_gap(scheme, beta, n, r0):
    # At the closed-form time the float64 ODE's gap is 1e-2; 0.1 % earlier it is not yet.
    t = time_to_gap(scheme, beta=beta, n_tokens=n, r0=r0, gap=1e-2)
    with jax.enable_x64(True):
        sol = SymmetricODE(
            scheme,
            beta,
            n,
            r0,
            SaveAt(t, (0.999 * t, t)),
            ODEIntegrator(rtol=1e-11, atol=1e-13),
        ).solve()
    before, at = np.asarray(sol.log_gap)
    assert at == pytest.approx(math.log(1e-2), abs=1e-7)
    assert before > math.log(1e-2) + 1e-6


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_the_time_grows_with_beta(name):
    # What the refusal's "beta ≤ b" relies on.
    for n in (2, 32, 1000):
        times = [
            time_to_gap(scheme_from_name(name, alpha=0.7), beta=b, n_tokens=n)
            for b in np.linspace(0.0, 14.0, 29)
        ]
        finite = np.asarray([t for t in times if math.isfinite(t)])
        assert np.all(np.diff(finite) > 0) and len(finite) > 10


def test_mix_ln_time_falls_as_tau_grows_to_post_ln():
    # What "tau ≥ τ" relies on; the limit is Post-LN's time, reached in the Post-LN phase.
    for beta in (0.0, 3.0, 6.0):
        taus = np.geomspace(1e-3, 1e5, 60)
        times = np.asarray([time_to_gap(MixLN(tau=v), beta=beta, n_tokens=32) for v in taus])
        assert np.all(np.diff(times) <= 1e-12 * times[1:])
        assert times[-1] == time_to_gap(PostLN(), beta=beta, n_tokens=32)


def test_the_time_scales_with_r0_and_one_over_alpha():
    pre = scheme_from_name("pre-ln")
    one = time_to_gap(pre, beta=3.0, n_tokens=32, r0=1.0)
    assert time_to_gap(pre, beta=3.0, n_tokens=32, r0=7.0) == pytest.approx(7 * one, rel=1e-12)
    one = time_to_gap(NGPT(alpha=1.0), beta=3.0, n_tokens=32)
    assert time_to_gap(NGPT(alpha=4.0), beta=3.0, n_tokens=32) == pytest.approx(one / 4)


# --- the CLI: one line, status 2, before the study -------------------------------------------


def _refused(tmp_path, monkeypatch, args) -> str:
    """Status 2, one line, no --out folder made, and the study never called."""
    monkeypatch.setattr(_schemes, "schemes_study", _reached)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["schemes", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert not out.exists()
    return lines[0]


def test_the_reported_command_is_refused_up_front(tmp_path, monkeypatch):
    # The audit's command: 10 s of computing, then "pre-ln: 1 − γ never reaches 1e-2".
    args = ["--beta", "12", "--rw-n-trajectories", "4", "--rw-n-layers", "20"]
    line = _refused(tmp_path, monkeypatch, args)
    assert "pre-ln, mix-ln and peri-ln at --beta=12, --n-tokens=32, --r0=1, --tau=0.5" in line
    assert "after t = 1e7; allowed: --beta ≤ 6.26, or leaving pre-ln, mix-ln and" in line


CASES = {
    "beta": (["--schemes", "sqrt-scaling", "--beta", "16.9"], "--beta ≤ "),
    "r0": (["--schemes", "pre-ln,peri-ln", "--beta", "3", "--r0", "1e6"], "--r0 ≤ "),
    "alpha": (["--schemes", "ngpt", "--beta", "3", "--alpha", "1e-7,1"], "--alpha ≥ "),
    "tau": (["--schemes", "mix-ln", "--beta", "9"], "--tau ≥ "),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_allowed_value_in_the_message_is_allowed_and_just_beyond_it_is_not(
    tmp_path, monkeypatch, case
):
    args, needle = CASES[case]
    line = _refused(tmp_path, monkeypatch, [*SMALL, *args])
    match = re.search(re.escape(needle) + r"([0-9.e+-]+),", line)
    assert match, line
    bound = float(match.group(1))
    options: dict[str, Any] = {"n_tokens": 4, "dim": 5, "beta": 3.0, "alpha": 1.0, "tau": 0.5}
    options["r0"] = 1.0
    options |= {args[i][2:]: float(args[i + 1].split(",")[0]) for i in range(2, len(args), 2)}
    names = args[1].split(",")
    beyond = bound * (0.98 if "≥" in needle else 1.02)  # past the 3-digit rounding
    at: dict[str, Any] = {**options, case: bound}
    schemes.check_schemes_start(names, **at)
    with pytest.raises(ParameterError, match=case):
        schemes.check_schemes_start(names, **{**at, case: beyond})


@pytest.mark.parametrize("r0", ["1e-50", "5e-20", "2e19", "1e30"])
def test_a_start_radius_float32_cannot_square_is_refused(tmp_path, monkeypatch, r0):
    # --r0 1e-50 was refused as "r0=0.0" after 5 s; 1e-30 and 1e30 ran and failed with
    # "NaN states ... lower the horizon" (|r0 e_i|² under- or overflows float32).
    line = _refused(tmp_path, monkeypatch, [*SMALL, "--r0", r0])
    assert f"--r0={r0} is outside the allowed range [2**-63, 2**64)" in line


@pytest.mark.parametrize("r0", [2.0**-63, 2e-19, 1.8e19])
def test_the_radius_range_is_inclusive_where_float32_holds_the_square(r0):
    schemes.check_schemes_start(["post-ln"], n_tokens=4, dim=5, beta=1.0, alpha=1.0, tau=0.5, r0=r0)


@pytest.mark.parametrize("tau", ["1e300", "1e39"])
def test_a_tau_float32_cannot_hold_is_refused_as_typed(tmp_path, monkeypatch, tau):
    # Issue 42: "tau=inf must be finite" (Mix-LN's float32 leaf had overflowed), not what
    # the user typed.
    line = _refused(tmp_path, monkeypatch, [*SMALL, "--tau", tau])
    assert f"--tau={tau} is outside the allowed range [0, 3.40282e38]" in line


def test_the_largest_tau_is_float32s_largest():
    at = {"n_tokens": 4, "dim": 5, "beta": 1.0, "alpha": 1.0, "r0": 1.0}
    schemes.check_schemes_start(["mix-ln"], tau=schemes.TAU_MAX, **at)
    MixLN(tau=schemes.TAU_MAX)  # held
    with pytest.raises(ParameterError, match=r"tau=3\.40282e38 is outside"):
        schemes.check_schemes_start(["mix-ln"], tau=np.nextafter(schemes.TAU_MAX, np.inf), **at)


def test_the_help_says_which_options_the_random_weights_part_ignores():
    # Issue 42 item 9: --dim and --beta did not set part (c), and the help did not say so.
    text = " ".join(CliRunner().invoke(main, ["schemes", "--help"]).output.split())
    size = schemes_defaults.RANDOM_WEIGHTS
    options = text.split("Options:", 1)[1]
    for option in ("--n-tokens INTEGER", "--dim INTEGER", "--beta FLOAT"):
        help_line = options.split(option, 1)[1].split("[default", 1)[0]
        assert "not the random-weights part (c)" in help_line, (option, help_line)
    assert f"d = {size['rw_dim']}, n = {size['rw_n_tokens']}, β = √d" in text
    assert f"which runs at d = {size['rw_dim']}" in text


# --- the Python API: ParameterError before the first stage ----------------------------------


@pytest.fixture
def spied(monkeypatch):
    """The study's stages replaced by stand-ins that raise :class:`Reached`."""
    stages = ("_scheme_part", "_ngpt_part", "_random_weights_part", "terminal_fit")
    for name in ("symmetric_start", *stages):
        monkeypatch.setattr(schemes, name, _reached)


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"beta": 12.0}, "beta ≤ 6.26"),
        ({"schemes": ["ngpt"], "alphas": [1e-7, 1.0]}, "alphas[0] ≥ 3.35e-7"),
        ({"schemes": ["post-ln"], "r0": 1e-30}, "r0=1e-30 is outside the allowed range"),
        ({"schemes": ["mix-ln"], "tau": 1e300}, "tau=1e300 is outside the allowed range"),
    ],
)
def test_schemes_study_refuses_before_any_stage(spied, arguments, needle):
    with pytest.raises(ParameterError) as refused:
        schemes.schemes_study(progress=False, **arguments)
    assert needle in str(refused.value)


def test_schemes_study_with_good_arguments_reaches_its_first_stage(spied):
    # The control: the stand-ins above do catch a study that starts.
    with pytest.raises(Reached):
        schemes.schemes_study(progress=False)


# --- the fit itself, where the closed form allows it ----------------------------------------


@pytest.mark.slow  # full terminal fits, ~2.5 s each
def test_post_ln_fits_where_float32_could_not_resolve_the_window():
    # β = 14: the fit window (20 time units at t ≈ 2e4) had no usable save in float32
    # ("needs at least 6 usable save times ... got 0", after the run's other stages).
    theory, fit, _ = schemes.terminal_fit(PostLN(), beta=14.0, n_tokens=32, r0=1.0)
    assert fit.contains(theory.value) and fit.value == pytest.approx(2.0, abs=1e-9)


@pytest.mark.slow  # full terminal fits, ~2.5 s each
def test_a_fit_that_starts_just_before_t_1e7_runs():
    # The closed form puts nGPT's start 1e-9 before t = 1e7 (it is good to 1e-11); the
    # solver's own error (1e-6 or so) may put it just after: the probe looks past 1e7.
    alpha = (1 + 1e-9) * time_to_gap(NGPT(alpha=1.0), beta=3.0, n_tokens=32) / 1e7
    schemes.check_schemes_start(
        ["ngpt"], n_tokens=32, dim=32, beta=3.0, alpha=alpha, tau=0.5, r0=1.0
    )
    theory, fit, (ts, _) = schemes.terminal_fit(NGPT(alpha=alpha), beta=3.0, n_tokens=32, r0=1.0)
    assert ts[0] >= 1e7 and fit.contains(theory.value)
