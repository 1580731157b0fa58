"""Every bad input is refused up front, by name (issue 12, "Why" items 4-8).

The CLI exits with status 2 and one line naming the parameter before anything is computed
or written; the API raises :class:`attndyn.ParameterError`. Nothing here compiles a model
except the one overflow run at the end.
"""

import functools
import math
import re
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

import attndyn as ad
from attndyn._estimate.diagnose import overflow_message
from attndyn.cli import main
from attndyn.cli._evolution import evolution
from attndyn.cli._phase import phase_diagram
from attndyn.studies import phase as phase_study
from attndyn.theory import _phase as theory_phase
from tests.helpers import run_untyped
from tests.markers import two_cpu_devices

PHASE = ["phase-diagram", "--beta", "1", "--dim", "4", "--n-trajectories", "4", "--depth", "2"]
PHASE += ["--horizon", "1", "--no-progress"]


def _refused(args, tmp_path, needle):
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    # One line and nothing else: click's usage block, hint and blank lines around the error
    # were four lines before 0.4.2.
    error = result.output.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("Error:"), result.output
    assert needle in error[0], result.output
    assert not (tmp_path / "out").exists()  # nothing created, nothing computed
    return error[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["phase-diagram", "--trajectoriez", "5"], "No such option '--trajectoriez'"),
        (["phase-diagram", "--route", "nope"], "'nope' is not one of 'auto', 'full'"),
        (["phase-diagram", "extra"], "Got unexpected extra argument (extra)"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_click_usage_errors_are_one_line_too(tmp_path, args, needle):
    # Errors that click finds itself (unknown options and commands, bad choices) follow
    # the same rule as attndyn's own: status 2, one line naming the parameter.
    _refused(args, tmp_path, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # Why 5: silently wrong numbers
        (["--depth", "1000000000", "--horizon", "60"], "6e+10 layers is more than the 2147483647"),
        (["--horizon", "1e-6"], "it would run 0 layers"),
        (["--seed", str(2**32)], "seed=4294967296 must be an integer in [0, 4294967295]"),
        (["--n-trajectories", "3000000000"], "trajectories=3000000000 must be an integer in"),
        # Why 6: tracebacks instead of messages
        (["--beta", "0:1:nan"], "--beta '0:1:nan': every number must be finite"),
        (["--beta", "0:inf:1"], "--beta '0:inf:1': every number must be finite"),
        (["--beta", "0:1e9:1e-9"], "--beta '0:1e9:1e-9' has more than"),
        (["--dim", "nan"], "--dim 'nan': every number must be finite"),
        (["--dim", "1e20"], "dim=100000000000000000000 must be an integer in [2, 65536]"),
        (["--seed", str(2**64)], "seed=18446744073709551616 must be an integer"),
        (["--sigma", "nan"], "sigma=nan must be finite"),
        (["--tol", "inf"], "tol=inf must be finite"),
        # Why 8: flags that were ignored
        (["--early-absorption", "0"], "early-absorption=0.0 is outside the allowed range"),
        (["--solver", "heun"], "--solver applies to --engine sde only"),
        (["--dt", "0.1"], "--dt applies to --engine sde only"),
        (["--process-id", "1"], "process_id=1 needs a coordinator"),
        (["--chunk-size", str(2**31)], "chunk-size=2147483648 must be an integer in"),
        # The same point twice is the same trajectories twice, not twice the statistics.
        (["--beta", "1,0.5,1.0"], "--beta '1,0.5,1.0' lists 1 more than once"),
        (["--dim", "4,4"], "--dim '4,4' lists 4 more than once"),
    ],
)
def test_phase_diagram_refuses_up_front(tmp_path, args, needle):
    _refused([*PHASE, *args], tmp_path, needle)


def test_output_that_is_a_file_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    result = CliRunner().invoke(main, [*PHASE, "--out", str(afile)])
    assert result.exit_code == 2 and "is a file, not a folder" in result.output
    assert afile.read_text() == "keep"


EVOLUTION = ["evolution", "--beta", "1", "--dim", "4", "--n-tokens", "2", "--n-trajectories", "4"]
EVOLUTION += ["--depth", "2", "--horizon", "1", "--saves", "2", "--no-progress"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--saves", "1000000000"], "saves=1000000000 must be an integer in [2, 100000]"),
        (["--eps", "nan", "--noise", "scalar"], "every number must be finite"),
        (["--engine", "sde", "--dt", "1e-12", "--horizon", "1e4"], "horizon/dt"),
        (["--n-tokens", "99999999"], "n_tokens=99999999 must be an integer in [1, 65536]"),
    ],
)
def test_evolution_refuses_up_front(tmp_path, args, needle):
    _refused([*EVOLUTION, *args], tmp_path, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seed", str(2**32)], "seed=4294967296"),
        (["--beta", "nan"], "beta=nan must be finite"),
        (["--dim", "100000"], "dim=100000 must be an integer in [2, 16384]"),
        (
            ["--rw-n-layers", str(2**40)],
            "--rw-n-layers=1099511627776 must be an integer in [1, 2147483647]",
        ),
    ],
)
def test_schemes_refuses_up_front(tmp_path, args, needle):
    _refused(["schemes", *args], tmp_path, needle)


# --- the API: constructors and shapes -------------------------------------------------------


def test_swept_parameters_must_be_finite_scalars():
    # Why 8: beta=[1, 2] was broadcast per key token; drift=nan and tol=2 were accepted.
    # The arrays are made in NumPy: jnp.ones, a cast and the sampler each compile.
    with pytest.raises(ad.ParameterError, match="beta must be a scalar"):
        ad.Attention(jnp.asarray(np.array([1.0, 2.0], np.float32)))
    with pytest.raises(ad.ParameterError, match="drift=nan must be finite"):
        ad.MatrixValues(1.0, drift=float("nan"))
    with pytest.raises(ad.ParameterError, match="sigma must be a scalar"):
        ad.MatrixValues(jnp.asarray(np.ones(3, np.float32)))
    y = np.random.default_rng(0).standard_normal((3, 4))
    x = jnp.asarray((y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32))
    for tol in (2.0, 0.0, float("nan")):
        with pytest.raises(ad.ParameterError, match="tol="):
            ad.cluster_classes(x, tol)
    with pytest.raises(ad.ParameterError, match="query has shape"):
        ad.Attention(1.0, query=jnp.asarray(np.ones((2, 3), np.float32)))


@pytest.mark.parametrize(
    ("attention", "needle"),
    [
        (lambda: ad.Attention(1.0, n_heads=3), "dim=4 must be divisible by n_heads=3"),
        (
            lambda: ad.Attention(1.0, query=jnp.asarray(np.eye(3, dtype=np.float32))),
            r"query has shape \(3, 3\); for d = 4 and n_heads = 1 it must be one of \(4, 4\)",
        ),
    ],
)
def test_heads_and_matrices_are_checked_against_the_dimension(attention, needle):
    # Why 6: a raw TypeError at trace time; now refused while planning, naming the point.
    def make(beta, dim, n_tokens):
        del beta, dim, n_tokens
        return ad.DiscreteTransformer(attention(), depth=2, saveat=ad.SaveAt(1.0))

    with pytest.raises(ad.ParameterError, match=r"at \{'dim': 4.*" + needle):
        ad.estimate_probabilities(
            make,
            [{"dim": 4, "n_tokens": 2, "beta": 1.0}],
            key=jax.random.key(0),
            n_trajectories=4,
            progress=False,
        )
    # Applied directly, the model says the same instead of failing inside a reshape.
    with pytest.raises(ad.ParameterError, match=needle):
        attention()(jnp.asarray(np.ones((2, 4), np.float32)))


# --- Why 4: the exact curve at extreme β, decided before the simulation ---------------------


def test_exact_curve_beyond_beta_355():
    # β > 355 overflowed cosh(2β) after the whole simulation had run.
    assert 0.48 < ad.theory.p_antipodal_uniform(360.0, 4) < 0.5
    assert 0.47 < ad.theory.p_antipodal_uniform(360.0, 64) < 0.5
    with pytest.raises(ad.ParameterError, match=r"beta=2000000\.0 is above 1e\+06"):
        ad.theory.p_antipodal_uniform(2e6, 4)


@pytest.mark.slow
def test_exact_curve_is_finite_at_every_beta_and_tends_to_one_half():
    # The β → ∞ limit is P(antipodal | z) = arccos(z)/π, approached like β^(−1/2): within
    # 1e-3 at β = 1e6 (observed 1.4e-4 for d = 3, 8e-4 for d = 4096).
    for dim in (3, 4, 64, 4096):
        values = [ad.theory.p_antipodal_uniform(b, dim) for b in (360.0, 1e4, 1e6)]
        assert all(0.4 < v < 0.5 for v in values) and values == sorted(values), (dim, values)
        assert abs(values[-1] - 0.5) < 1e-3
        z = 0.3
        limit = math.acos(z) / math.pi
        assert abs(ad.theory.p_antipodal_given_overlap(z, 1e6, dim) - limit) < 2e-3


@pytest.mark.parametrize(("beta", "dim"), [(4.0, 8), (10.0, 5), (2.0, 16), (30.0, 4)])
def test_exact_curve_two_quadratures_agree(monkeypatch, beta, dim):
    # Two routes to the same integral: the +1 end as an algebraic weight (a₊), or kept in
    # the integrand in log form. Where both are well conditioned they agree to 1e-8.
    values = []
    for amplification in (math.inf, 0.0):
        monkeypatch.setattr(theory_phase, "_AMPLIFICATION", amplification)
        values.append(ad.theory.p_antipodal_uniform(beta, dim))
    assert values[0] == pytest.approx(values[1], abs=1e-8)


def test_large_dimension_no_longer_gives_certain_antipodes():
    # The algebraic weight alone lost every digit at large d·ln β and returned 1.0 (d = 64,
    # β = 50; d = 512, β = 4): the probability is below its β → ∞ limit 1/2.
    assert 0.4 < ad.theory.p_antipodal_uniform(50.0, 64) < 0.5
    assert 0.0 < ad.theory.p_antipodal_uniform(4.0, 512) < 0.01


def test_exact_curve_is_computed_before_the_simulation(monkeypatch):
    order = []
    monkeypatch.setattr(
        phase_study, "p_antipodal_uniform", lambda b, d, norm="rms": order.append("exact") or 0.25
    )

    def estimate(self, *args, **kwargs):
        order.append("simulation")
        raise KeyboardInterrupt

    monkeypatch.setattr(phase_study.MonteCarlo, "estimate", estimate)
    points = phase_study.phase_points("beta-d", betas=[400.0, 2e6], dims=[4], n_tokens=[2])
    assert np.isnan(phase_study.exact_curve(points)[1])
    order.clear()
    with pytest.raises(KeyboardInterrupt):
        phase_study.phase_diagram_study(
            "beta-d", phase_study.ModelSpec(depth=2, horizon=1.0), phase_study.MonteCarlo(), points
        )
    assert order == ["exact", "simulation"]  # β = 2e6 > EXACT_BETA_MAX: omitted, with a note


# --- Why 7: messages that name the real cause and only flags that exist ----------------------


def test_overflow_messages_name_the_cause_and_the_threshold():
    pre_ln = ad.PreLN()  # needs the attention's output whole: overflows past 44.4
    usa = ad.DiscreteTransformer(
        ad.Attention(50.0, kind="unnormalized"), ad.MatrixValues(1.0), pre_ln
    )
    message = overflow_message(usa)
    assert "attention.beta" in message and "44.4" in message and "88" not in message
    huge_sigma = ad.DiscreteTransformer(ad.Attention(1.0), ad.MatrixValues(1e30))
    message = overflow_message(huge_sigma)
    assert "values.sigma=1e+30" in message and "attention" not in message
    # 3·I made in NumPy: eagerly, jnp.eye and the product compile five programs.
    query = jnp.asarray(3 * np.eye(4, dtype=np.float32))
    scaled = ad.Attention(20.0, kind="unnormalized", query=query)
    assert "β·‖Q‖‖K‖ = 60" in overflow_message(ad.DiscreteTransformer(scaled, scheme=pre_ln))
    quiet = overflow_message(ad.DiscreteTransformer(ad.Attention(30.0, kind="unnormalized")))
    assert "No parameter" in quiet
    # Post-LN takes the output with its exponent apart: no β overflows it.
    post = ad.DiscreteTransformer(ad.Attention(500.0, kind="unnormalized"), ad.MatrixValues(1.0))
    assert "No parameter" in overflow_message(post)


def _lone_token_turns_nan(model) -> bool:
    """Whether 64 one-token trajectories of ``model`` hit a NaN (each layer draws v_n = ±1,
    so a singular multiplier is met by some trajectory with probability 1 − 2⁻⁶⁴ in each
    layer where it is singular)."""
    # Starts drawn in NumPy and the states read in NumPy: the JAX sampler, the slicing and
    # the reductions each compile.
    y = np.random.default_rng(0).standard_normal((64, 1, 3))
    x0 = jnp.asarray((y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32))
    states = model.simulate(x0, jax.random.split(jax.random.key(1), 64))
    return bool(np.any(np.isnan(np.asarray(states))))


@pytest.mark.default_case()
@pytest.mark.parametrize(
    ("scheme", "eps", "depth", "horizon", "singular"),
    [
        # Post-LN: V_n = (1/L − ε/√L)·I = −I at ε = (L + 1)/√L, and nowhere else.
        (ad.PostLN(), 2.0, 1, 4.0, True),
        (ad.PostLN(), 2.5, 4, 1.0, True),
        (ad.PostLN(), 2.4, 4, 1.0, False),
        (ad.MixLN(tau=0.5), 2.5, 4, 1.0, True),
        # Pre-LN from the start: x + s·θ vanishes only if the radius walk 1 + Σ s_k hits 0,
        # which 1 − 0.95a + 1.45b never does in 4 layers (not covered by the predicate).
        (ad.MixLN(tau=0.0), 2.4, 4, 1.0, False),
        # sqrt-scaling: θ(1 + s/√(t + 1)) = 0 at t = 3 for s = 1 − ε = −2 (exact in float32);
        # the stack must reach t = 3.
        (ad.SqrtScaling(), 3.0, 1, 4.0, True),
        (ad.SqrtScaling(), 3.0, 1, 3.0, False),
        (ad.PeriLN(), 0.5, 4, 1.0, False),  # normalises V_n A_i itself, guarding its zero
    ],
)
def test_undefined_layer_maps_are_named_where_and_only_where_they_turn_nan(
    scheme, eps, depth, horizon, singular
):
    # Two routes: the predicate on the parameters, and the map run on one token (whose
    # attention output is itself) in float32.
    model = ad.DiscreteTransformer(
        ad.Attention(0.5), ad.ScalarValues(eps), scheme, depth=depth, saveat=ad.SaveAt(horizon)
    )
    causes = model.undefined_maps()
    assert bool(causes) == singular, causes
    assert _lone_token_turns_nan(model) == singular
    if singular:
        assert "V_n = " in causes[0] and scheme.name in causes[0]
        assert causes[0] in overflow_message(model)
    # Continuous laws have no atoms: nothing is undefined with positive probability.
    gaussian = eqx.tree_at(lambda m: m.values, model, ad.ScalarValues(eps, "gaussian"))
    assert gaussian.undefined_maps() == []


def test_an_undefined_map_is_warned_before_the_run_and_named_after_it():
    def make(dim, n_tokens, eps):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(0.0), ad.ScalarValues(eps), depth=1, saveat=ad.SaveAt(4.0)
        )

    points = [{"dim": 2, "n_tokens": 1, "eps": 2.0}, {"dim": 2, "n_tokens": 1, "eps": 0.5}]
    with pytest.warns(UserWarning, match=r"at 1 of 2 points the model's map is undefined"):
        broken = r"a cosine outside \[−1, 1\]\)\. Cause: the value"
        with pytest.raises(ad.NonFiniteError, match=broken):
            ad.estimate_probabilities(
                make, points, key=jax.random.key(0), n_trajectories=8, progress=False
            )


def test_rows_too_large_to_normalise_are_reported_not_counted_as_unclustered():
    # Pre-LN with unnormalised attention at β = 50: coordinates stay finite but their squares
    # overflow float32, so no direction is defined; they used to be normalised to zero and
    # counted as valid "unclustered" trajectories with mean cosine 0. That β is now refused
    # before running (the largest exponent, 50, is known); a start radius of 1e200 still
    # overflows only at run time (in float32, and in the float64 rerun of issue 42: 1e20,
    # used here before, runs through there), and is reported then.
    def usa(beta, dim, n_tokens):
        del dim, n_tokens
        attention = ad.Attention(beta, kind="unnormalized")
        return ad.DiscreteTransformer(
            attention, ad.DeterministicValues(), ad.PreLN(), depth=10, saveat=ad.SaveAt(2.0)
        )

    def run(model_fn, beta, radius=1.0):
        point = dict(dim=3, n_tokens=5, beta=beta)
        key = jax.random.key(0)
        return ad.estimate_probabilities(
            model_fn, [point], key=key, n_trajectories=16, radius=radius, progress=False
        )

    with pytest.raises(ad.ParameterError, match=r"attention\.beta.*= 50 .*--x64"):
        run(usa, 50.0)

    def pre(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(ad.Attention(beta), ad.MatrixValues(1.0), ad.PreLN(), depth=4)

    with pytest.raises(ad.NonFiniteError, match=r"Cause: radius=1e\+200"):
        run(pre, 1.0, radius=1e200)


@pytest.mark.parametrize("attention", ["unnormalized", "softmax"])
def test_overlap_diffusion_overflow_names_beta(attention):
    # The USA overlap diffusion carries e^{2β}: float32 NaN from β ≈ 44.4 (50: 10 of 64
    # trajectories, 100: all), which the message called "no parameter past its threshold"
    # (audit). SA has no such factor: no cause named.
    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.OverlapSDE(
            beta, attention=attention, noise="hybrid", eps=1.0, saveat=ad.SaveAt(2.0)
        )

    points = [{"beta": 100.0, "dim": 3, "n_tokens": 2}]
    message = overflow_message(make(**points[0]))
    if attention == "softmax":
        assert "No parameter of the model is past" in message
        return
    assert "unnormalised attention (beta)" in message and "44.4" in message, message
    # Refused before anything runs (its e^{2β} is known to overflow), naming the way out.
    with pytest.raises(ad.ParameterError, match=r"nnormalised attention \(beta\).*--x64"):
        ad.estimate_probabilities(
            make, points, key=jax.random.key(0), n_trajectories=8, progress=False
        )


@pytest.mark.slow
def test_overflow_from_beta_46_is_explained_and_its_advice_exists():
    # Unnormalised attention overflows float32 from β ≈ 46 in a layer that needs its output
    # whole (threshold ½·ln max = 44.4 plus ln(√L/σ) = 0.8), which the old message put at
    # 88. Pre-LN is such a layer: refused before running, naming flags that exist. Post-LN
    # normalises the output with its token and runs at that β.
    def make(beta, dim, n_tokens, scheme=None):
        del dim, n_tokens
        attention = ad.Attention(beta, kind="unnormalized")
        return ad.DiscreteTransformer(
            attention, ad.MatrixValues(1.0), scheme or ad.PreLN(), depth=5, saveat=ad.SaveAt(1.0)
        )

    with pytest.raises(ad.ParameterError) as raised:
        ad.estimate_probabilities(
            make, [{"dim": 4, "n_tokens": 2, "beta": 46.0}], key=jax.random.key(0),
            n_trajectories=4, progress=False, route="full",
        )  # fmt: skip
    message = str(raised.value)
    assert "44.4" in message and "attention.beta" in message
    # Every CLI flag the advice names exists on both estimator commands.
    flags = set(re.findall(r"--[a-z][a-z0-9-]+", message))
    assert flags == {"--x64"}
    for command in (phase_diagram, evolution):
        options = {opt for param in command.params for opt in param.opts}
        assert flags <= options, command.name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = ad.estimate_probabilities(
            lambda **p: make(**p, scheme=ad.PostLN()), [{"dim": 4, "n_tokens": 2, "beta": 46.0}],
            key=jax.random.key(0), n_trajectories=4, progress=False, route="full",
            on_merged="count",
        )  # fmt: skip
    assert int(ds["n_nonfinite"][0]) == 0 and int(ds["n_valid"][0]) == 4


@pytest.mark.slow
@two_cpu_devices
def test_chunk_is_capped_at_the_trajectory_count():
    # Why 8: --chunk-size 1e7 with 40 trajectories padded every chunk to 1e7.
    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(beta, kind="unnormalized"), ad.MatrixValues(1.0), depth=5,
            saveat=ad.SaveAt(1.0),
        )  # fmt: skip

    ds = ad.estimate_probabilities(
        make, [{"dim": 4, "n_tokens": 2, "beta": 1.0}], key=jax.random.key(0),
        n_trajectories=4, chunk_size=10**7, progress=False, route="full",
    )  # fmt: skip
    # One tile per device: the study's 4 trajectories rounded up to a tile of 8, on each of
    # this process's 2 devices (conftest), never the 10⁷ asked for.
    assert len(jax.devices()) == 2
    assert ad.provenance(ds)["chunk_size"] == 16 and int(ds["n_valid"][0]) == 4
    assert np.isfinite(ds["mean_cosine"].values).all()


_WRONG_KINDS_CHILD = """
import diffrax, jax, jax.numpy as jnp, numpy as np
import attndyn as ad

def refused(build):
    try:
        build()
    except ad.ParameterError as error:
        return str(error)
    return "accepted"

print(refused(lambda: ad.DiscreteTransformer(1.0)))
print(refused(lambda: ad.DiscreteTransformer(ad.Attention(1.0), "gaussian")))
print(refused(lambda: ad.ODEIntegrator(solver="tsit5")))
print(refused(lambda: ad.ODEIntegrator(solver=diffrax.SRA1())))

def make(beta, dim, n_tokens):
    del dim, n_tokens
    return ad.DiscreteTransformer(ad.Attention(beta), depth=2, saveat=ad.SaveAt(1.0))

key = jax.random.key(0)
ds = ad.estimate_probabilities(
    make, [dict(dim=3, n_tokens=2, beta=jnp.asarray(1.0))], key=key,
    n_trajectories=np.int64(8), tol=np.float32(1e-3), progress=False,
)
print(int(ds["n_valid"][0]))
bad = [dict(dim=3, n_tokens=2, beta=1.0), dict(dim=3, n_tokens=2, beta=jnp.ones(2))]
print(refused(lambda: ad.estimate_probabilities(make, bad, key=key, n_trajectories=8)))
one = dict(dim=3, n_tokens=2, beta=1.0)
print(refused(lambda: ad.estimate_probabilities(make, one, key=key, n_trajectories=8)))
"""


@pytest.mark.slow
def test_wrong_kinds_and_numpy_scalars_as_a_user_meets_them():
    # Run without the tests' runtime type checker (jaxtyping), which would reject the wrong
    # kinds first: a user's process has only attndyn's own checks. Components of the wrong
    # kind failed later with AttributeError or diffrax's TermAndSolverIncompatible; NumPy
    # scalars for n_trajectories or tol failed writing provenance (JSON); a point value with
    # no identity failed after the earlier points had run (audit).
    lines = run_untyped(_WRONG_KINDS_CHILD).strip().splitlines()[-7:]
    assert lines[0].startswith("attention must be an attndyn.Attention")
    assert lines[1].startswith("values must be a value operator")
    assert lines[2].startswith("solver must be a diffrax ODE solver")
    assert lines[3].startswith("solver must be a diffrax ODE solver")
    assert lines[4] == "8"
    assert "holds a value that is not a number" in lines[5]
    assert lines[6].startswith("points must be a list of dicts")


def _merging(beta, dim, n_tokens, horizon):
    # Deterministic Post-LN at β = 4 over t = 30 merges the tokens to float32 resolution:
    # their class is then the arithmetic's.
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.DeterministicValues(), ad.PostLN(), depth=5,
        saveat=ad.SaveAt(horizon, (horizon / 2, horizon)),
    )  # fmt: skip


_MERGING = [dict(dim=3, n_tokens=5, beta=4.0, horizon=30.0)]
_run_merging = functools.partial(
    ad.estimate_probabilities, _merging, key=jax.random.key(0), n_trajectories=40,
    route="full", progress=False,
)  # fmt: skip


@pytest.mark.slow
def test_numerically_merged_tokens_stop_the_run_when_asked(tmp_path):
    # on_merged="raise": the run stops at the first chunk with a merge, naming the point
    # and the ways out, after saving the checkpoint.
    path = tmp_path / "ck.nc"
    with pytest.raises(ad.NumericalMergeError, match=r"merged numerically in \d+ of 40") as e:
        _run_merging(_MERGING, checkpoint=path, on_merged="raise")
    assert "x64=True" in str(e.value) and "on_merged='exclude'" in str(e.value)
    assert "resumes from the checkpoint" in str(e.value) and path.exists()
    # raise, exclude and count tally the same arithmetic: a rerun with count resumes, its
    # work kept.
    with pytest.warns(ad.NumericalMergeWarning, match="They are counted in their class"):
        resumed = _run_merging(_MERGING, checkpoint=path, on_merged="count")
    with pytest.warns(ad.NumericalMergeWarning):
        fresh = _run_merging(_MERGING, on_merged="count")
    np.testing.assert_array_equal(resumed["count"], fresh["count"])
    assert ad.provenance(resumed)["on_merged"] == "count"
    # The default tallies reruns where it needs them: not the same study.
    with pytest.raises(ad.ParameterError, match="on_merged"):
        _run_merging(_MERGING, checkpoint=path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ad.NumericalMergeWarning)
        far = _run_merging([{**_MERGING[0], "horizon": 1.0}])  # t = 1: far apart, no merge
    assert int(far["n_merged"].max()) == 0
    assert np.all(far["n_counted"].values == far["n_valid"].values[:, None])
    # Nothing merged: the merge-robust interval is Wilson's.
    np.testing.assert_array_equal(far["merge_ci_lower"], far["ci_lower"])
    np.testing.assert_array_equal(far["merge_ci_upper"], far["ci_upper"])


def test_merged_tokens_are_counted_with_their_bound_by_default():
    # The default (on_merged="auto") runs through: deterministic Post-LN contracts every
    # merged pair inside its cluster (the gap's rate is negative at every save time: κ =
    # ∞), so the merged trajectories are counted with a bound of 0, no rerun needed, no
    # warning, and the counts are the arithmetic's (as with "count").
    with warnings.catch_warnings():
        warnings.simplefilter("error", ad.NumericalMergeWarning)
        auto = _run_merging(_MERGING)
    with pytest.warns(ad.NumericalMergeWarning):
        counted = _run_merging(_MERGING, on_merged="count")
    assert int(auto["n_merged"].max()) > 0 and int(auto["n_rerun"][0]) == 0
    np.testing.assert_array_equal(auto["count"], counted["count"])
    np.testing.assert_array_equal(auto["merge_bound"], 0.0)
    np.testing.assert_array_equal(auto["merge_ci_lower"], auto["ci_lower"])
    merges = ad.provenance(auto)["merges"]
    assert merges["laws"][0]["drift"] == 1.0 and merges["n_rerun"] == [0]
    # And it is the float64 run of the same study (the smoke of tests/test_merges.py's
    # per-route comparisons): the same random numbers, so the same paths; 4 SE of 40.
    # Fewer merges at the save where float32 merges most: when a gap first rounds to zero
    # is the arithmetic's (at t = 15 float32 merged 1 of 40 on the CPU, none on an H200).
    wide = _run_merging(_MERGING, x64=True)
    most = int(np.argmax(auto["n_merged"].values[0]))
    assert int(wide["n_merged"][0, most]) < int(auto["n_merged"][0, most])
    for outcome in ("single", "antipodal", "unclustered"):
        a, b = (ds["probability"].sel(outcome=outcome).values for ds in (auto, wide))
        assert np.all(np.abs(a - b) <= 4 * np.sqrt(np.maximum(b * (1 - b), 1 / 40) / 40))


def test_excluded_merged_trajectories_leave_every_estimate():
    # exclude = count less the merged trajectories, per save time: the counts, the
    # denominators and the means' sums, two runs of the same trajectories.
    with pytest.warns(ad.NumericalMergeWarning, match="They are excluded"):
        excluded = _run_merging(_MERGING, on_merged="exclude")
    with pytest.warns(ad.NumericalMergeWarning):
        counted = _run_merging(_MERGING, on_merged="count")
    n_merged = counted["n_merged"].values
    assert n_merged[0, -1] > 0 and np.all(n_merged[:, -1] >= n_merged[:, 0])
    n_valid = counted["n_valid"].values[:, None]
    np.testing.assert_array_equal(excluded["n_counted"], n_valid - n_merged)
    np.testing.assert_array_equal(counted["n_counted"], np.broadcast_to(n_valid, n_merged.shape))
    removed = (counted["count"] - excluded["count"]).values
    assert np.all(removed >= 0) and np.all(removed.max(axis=-1) <= n_merged)
    # single, antipodal and unclustered partition the trajectories: exactly the merged
    # ones left them.
    partition = [list(ad.OUTCOMES).index(o) for o in ("single", "antipodal", "unclustered")]
    np.testing.assert_array_equal(removed[..., partition].sum(-1), n_merged)
    probability = excluded["probability"].values
    with np.errstate(invalid="ignore"):
        n_kept = excluded["n_counted"].values[..., None]
        np.testing.assert_allclose(probability, excluded["count"].values / n_kept)


@pytest.mark.parametrize("name", ["query", "key_matrix", "value", "output"])
def test_attention_matrices_with_nan_are_refused(name):
    # Accepted before; the run then reported NaN trajectories with no parameter at fault.
    matrix = np.eye(3, dtype=np.float32)
    matrix[1, 2] = np.nan  # in NumPy: .at[].set() compiles a scatter
    matrices: dict[str, Any] = {name: jnp.asarray(matrix)}
    with pytest.raises(ad.ParameterError, match=f"{name} has NaN or infinite entries"):
        ad.Attention(1.0, **matrices)


def test_wilson_interval_refuses_more_successes_than_trials():
    from attndyn._estimate.stats import wilson_interval

    with pytest.raises(ad.ParameterError, match="successes must be between 0 and trials"):
        wilson_interval(5, 3)
    lower, upper = wilson_interval(0, 0)  # no trials: no interval, as documented
    assert np.isnan(lower) and np.isnan(upper)


def test_a_symmetric_start_that_does_not_fit_the_dimension_is_refused():
    # 5 tokens with pairwise equal overlaps from an orthogonal start need d ≥ 5; at d = 3
    # the estimator used to return numbers.
    def make(beta, dim, n_tokens):
        del dim
        return ad.SymmetricODE(ad.PostLN(), beta, n_tokens=n_tokens, saveat=ad.SaveAt(1.0))

    with pytest.raises(ad.ParameterError, match="needs n_tokens <= dim; got n_tokens=5, dim=3"):
        ad.estimate_probabilities(
            make, [dict(dim=3, n_tokens=5, beta=1.0)], key=jax.random.key(0), n_trajectories=8,
            progress=False,
        )  # fmt: skip


@pytest.mark.slow
def test_softmax_past_its_float32_resolution_is_named_as_the_cause():
    # At β = 10¹² a float32 score rounds by ~6·10⁴, more than exp can take: the small
    # products fused into both the row maximum and the exponentials rounded differently,
    # every weight of a row underflowed and the row was 0/0. The error said no parameter
    # was past a threshold (audit). The threshold is ln(max)/eps = 7.4·10⁸ in float32.
    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(ad.Attention(beta), depth=5, saveat=ad.SaveAt(1.0))

    assert "No parameter of the model is past" in overflow_message(make(1e6, 4, 3))
    message = overflow_message(make(1e12, 4, 3))
    assert "softmax attention (attention.beta)" in message and "7.4e+08" in message, message
    if jax.default_backend() != "cpu":
        # On one H100 the same run ended finite (hard attention): its fused softmax takes
        # the row maximum and the exponentials from the same rounded scores, so no row
        # came out 0/0 and there was nothing to report. The message is checked above.
        return
    points = [{"beta": 1e12, "dim": 4, "n_tokens": 3}]
    with pytest.raises(ad.NonFiniteError, match=r"softmax attention \(attention.beta\)"):
        ad.estimate_probabilities(
            make, points, key=jax.random.key(0), n_trajectories=8, progress=False, route="full"
        )


def test_uniform_sphere_names_a_bad_count_and_takes_numpy_integers():
    # uniform_sphere is compiled (filter_jit): a NumPy integer would be traced and fail
    # inside JAX's shape code; a bad count gave an IndexError or a shape error.
    key = jax.random.key(0)
    with pytest.raises(ad.ParameterError, match="n_tokens=0 must be an integer >= 1"):
        ad.uniform_sphere(key=key, n_tokens=0, dim=3)
    with pytest.raises(ad.ParameterError, match="dim=-1 must be an integer >= 1"):
        ad.uniform_sphere(key=key, n_tokens=2, dim=-1)
    x = ad.uniform_sphere(key=key, n_tokens=np.int64(3), dim=np.int32(4))
    assert x.shape == (3, 4)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(x), axis=-1), 1.0, rtol=1e-6)
    # The same numbers as the documented construction: normalised jax.random.normal.
    g = np.asarray(jax.random.normal(key, (3, 4)), np.float64)  # normalised in NumPy
    np.testing.assert_allclose(x, g / np.linalg.norm(g, axis=-1, keepdims=True), rtol=1e-6)
