"""The phase-diagram and evolution studies with another normalization scheme (issue 42
item 10): the spec takes the scheme and its own number, refuses what the model has no use
for, records them as provenance fields, and attaches no theory of Post-LN's to another
scheme. All cheap: no study runs (tests/test_cli_phase.py runs one)."""

import numpy as np
import pytest

import attndyn as ad
from attndyn.studies.phase import (
    ModelSpec,
    exact_hybrid_curve,
    phase_model,
    three_token_curve,
)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tau": 0.3}, "tau=0.3 applies to scheme='mix-ln' only"),
        ({"scheme": "pre-ln", "alpha": 2.0}, "alpha=2.0 applies to scheme='ngpt' only"),
        ({"scheme": "mix-ln", "tau": -1.0}, "tau"),
        ({"scheme": "ngpt", "alpha": 0.0}, "alpha"),
        ({"scheme": "peri-ln", "engine": "sde"}, "scheme='peri-ln' has no sde engine"),
        ({"scheme": "Post-LN"}, "scheme='Post-LN' is not allowed; choose one of 'post-ln'"),
    ],
)
def test_spec_refuses_what_the_scheme_has_no_use_for(kwargs, match):
    with pytest.raises(ad.ParameterError, match=match):
        ModelSpec(**kwargs)


@pytest.mark.parametrize(
    ("scheme", "kind", "own"),
    [
        ("pre-ln", ad.PreLN, {}),
        ("mix-ln", ad.MixLN, {"tau": 0.25}),
        ("peri-ln", ad.PeriLN, {}),
        ("ngpt", ad.NGPT, {"alpha": 3.0}),
        ("sqrt-scaling", ad.SqrtScaling, {}),
    ],
)
def test_each_scheme_builds_and_is_recorded_as_fields(scheme, kind, own):
    spec = ModelSpec(scheme=scheme, norm="layernorm", depth=5, horizon=1.0, **own)
    model = spec.model_fn()(beta=1.0, dim=4, n_tokens=2)
    assert isinstance(model, ad.DiscreteTransformer)
    assert isinstance(model.scheme, kind) and model.scheme.norm.name == "layernorm"
    assert model.scheme.parameters == own
    record = spec.metadata()
    assert record["scheme"] == scheme and record["norm"] == "layernorm"
    assert {k: record[k] for k in ("tau", "alpha") if k in record} == own
    assert record["model_equation"] == (
        f"seed 004 Table 1 ({scheme} layer maps) with full value noise (V_n of seed 003 eq. 4)"
    )


def test_post_ln_is_built_and_recorded_as_before():
    # The same object as 0.4 built (same program, same checkpoint signature), its equation
    # seed 003's, and the scheme now a field.
    model = phase_model(beta=1.0, dim=4, n_tokens=2, depth=5, horizon=1.0)
    assert isinstance(model, ad.DiscreteTransformer) and model.scheme == ad.PostLN()
    record = ModelSpec().metadata()
    assert record["scheme"] == "post-ln" and "tau" not in record and "alpha" not in record
    assert record["model_equation"] == "seed 003 eq. 4 (Post-LN, full value noise)"


def test_no_three_token_reading_for_another_scheme():
    points = [{"beta": 1.0, "dim": 4, "n_tokens": 3}]
    curve = three_token_curve(points, ModelSpec(scheme="pre-ln"), tol=1e-3)
    assert np.isnan(curve).all()


def test_hybrid_exact_curve_of_layernorm_tokens_is_d_minus_1():
    # Centred LayerNorm tokens of R^4 move as RMS tokens of R^3 (the hybrid drift has no d;
    # the start is uniform on the hyperplane's sphere): the curve was R^4's. Softmax with
    # 1 + e^{-2β} < ε² < 2, where both ends attract and the start's law matters.
    point = {"beta": 2.0, "eps": 1.17, "dim": 4, "n_tokens": 2}
    (value,) = exact_hybrid_curve([point], "softmax", norm="layernorm")
    assert value == ad.theory.p_antipodal_hybrid_uniform(2.0, 1.17, 3, "softmax")
    assert abs(value - ad.theory.p_antipodal_hybrid_uniform(2.0, 1.17, 4, "softmax")) > 0.01


def test_the_summary_names_each_rate_law_and_reads_04_datasets():
    """schemes --json: a rate's ``law`` (exponential, power, sqrt-exponential) and its
    ``formula``, with 0.4's ``kind`` beside them in 0.5; a 0.4 dataset (its variable
    ``terminal_rate_kind``) gives the same summary. Built by hand: nothing runs."""
    import xarray as xr

    from attndyn._estimate.dataset import attach_provenance, provenance_record, study_fields
    from attndyn.studies import schemes_summary

    one = ("scheme", [0.0, 0.0])
    ds = xr.Dataset(
        {
            "initial_slope": one,
            "initial_slope_theory": one,
            "terminal_rate": ("scheme", [2.0, 2.0]),
            "terminal_rate_lower": one,
            "terminal_rate_upper": ("scheme", [3.0, 3.0]),
            "terminal_rate_theory": ("scheme", [2.0, 2.0]),
            "terminal_rate_law": ("scheme", ["exponential", "power"]),
            "terminal_rate_variable": ("scheme", ["t", "log t"]),
            "terminal_law": ("scheme", ["exp(-2t)", "t^-2"]),
        },
        coords={"scheme": ["post-ln", "pre-ln"]},
    )
    params = {"beta": 3.0, "n": 4, "d": 5, "r0": 1.0, "alpha": 1.0, "tau": 0.5}
    record = provenance_record(0.0, **study_fields("schemes"), params=params, random_seed=0)
    ds = attach_provenance(ds, record)
    summary = schemes_summary(ds)
    rate = summary["schemes"]["pre-ln"]["terminal_rate"]
    assert (rate["law"], rate["kind"], rate["formula"]) == ("power", "power", "t^-2")
    old = ds.rename({"terminal_rate_law": "terminal_rate_kind"})
    assert schemes_summary(old)["schemes"] == summary["schemes"]
