"""One model spec (issue 44 item 1): the engine and the noise are small objects whose
methods build a point's model and report its provenance; ModelSpec is their flat
constructor by name, checked once where it enters.

All cheap: models are built, never run.
"""

import collections
import re
import warnings
from typing import Any

import equinox as eqx
import pytest

import attndyn as ad
from attndyn import studies
from attndyn._models.sde import HybridSDE, TransformerSDE
from attndyn.studies import spec as spec_module
from attndyn.studies.spec import (
    NOISE_CLASSES,
    SDE,
    Discrete,
    MatrixNoise,
    NoNoise,
    ScalarNoise,
    StudyModel,
)

POINT = {"beta": 1.5, "dim": 4, "n_tokens": 3}

#: 0.5's equation table (studies/phase.py's EQUATIONS before the spec objects), kept here
#: as the provenance every (noise, engine) pair must still record, word for word.
EQUATIONS = {
    ("matrix", "discrete"): "seed 003 eq. 4 (Post-LN, full value noise)",
    ("matrix", "sde"): "seed 003 eq. 6 (Transformer SDE)",
    ("scalar", "discrete"): "seed 003 eq. 7 (Post-LN, scalar value noise)",
    ("scalar", "sde"): "seed 003 eq. 8 (hybrid SDE)",
    ("none", "discrete"): "seed 003 eq. 7 with ε = 0 (Post-LN, deterministic values)",
    ("none", "sde"): "seed 003 Lemma 2 (the attention ODE, fixed steps)",
}


@pytest.mark.parametrize(("noise", "engine"), list(EQUATIONS))
def test_each_pair_records_its_equation_and_builds_its_model(noise, engine):
    spec = studies.ModelSpec(noise=noise, engine=engine, horizon=2.0)
    record = spec.metadata()
    assert record["model_equation"] == EQUATIONS[(noise, engine)]
    assert record["engine"] == engine
    # σ is recorded for matrix noise only; the value law for the discrete engine only.
    assert ("sigma" in record) == (noise == "matrix")
    laws = {"matrix": "gaussian", "scalar": "rademacher", "none": None}
    assert record["values"] == (laws[noise] if engine == "discrete" else None)
    model = spec.model_fn()(**POINT, eps=0.5)
    if engine == "discrete":
        # The value operators 0.5 built: the same objects, so the same compiled programs.
        values = {
            "matrix": ad.MatrixValues(1.0),
            "scalar": ad.ScalarValues(0.5),
            "none": ad.ScalarValues(0.0),
        }[noise]
        assert isinstance(model, ad.DiscreteTransformer)
        assert repr(model.values) == repr(values)
        assert [float(x) for x in _leaves(model.values)] == [float(x) for x in _leaves(values)]
    else:
        assert type(model) is (TransformerSDE if noise == "matrix" else HybridSDE)
        if isinstance(model, HybridSDE):
            assert float(model.eps) == {"scalar": 0.5, "none": 0.0}[noise]


def _leaves(tree):
    import jax

    return jax.tree.leaves(tree)


@pytest.mark.parametrize(("old", "new"), [("full", "matrix"), ("hybrid", "scalar")])
def test_old_noise_names_read_as_todays_with_a_warning(old, new):
    with pytest.warns(DeprecationWarning, match=f"noise='{old}' is deprecated, use noise='{new}'"):
        before = studies.ModelSpec(noise=old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        after = studies.ModelSpec(noise=new)
    assert before == after and before.noise == new
    with pytest.warns(DeprecationWarning, match="deprecated"):
        studies.phase_model(**POINT, eps=0.5, noise=old)


def test_a_spec_is_checked_once_where_it_enters(monkeypatch):
    # 0.5's ModelSpec ran its checks twice (for_study rebuilt it), and every point rebuilt
    # and re-checked the whole model (phase_model per point): σ was checked per point.
    counts = collections.Counter()
    for name in ("check_bound", "check_choice", "check_int"):
        original = getattr(spec_module, name)

        def counted(param, *args, _original=original, **kwargs):
            counts[param] += 1
            return _original(param, *args, **kwargs)

        monkeypatch.setattr(spec_module, name, counted)
    spec = studies.ModelSpec(noise="matrix", sigma=2.0, values="uniform", depth=7)
    model_fn = spec.for_study("phase-diagram").model_fn()
    for beta in (0.5, 1.0, 2.0):
        model_fn(beta=beta, dim=3, n_tokens=2)
    assert counts["sigma"] == 1
    assert counts["depth"] == 1
    assert counts["scheme"] == counts["norm"] == counts["attention"] == 1
    assert counts["horizon"] == 1  # T entered once, from the study
    # The value law enters twice: the matrix and the scalar noise each take it (evolution
    # runs both from one spec).
    assert counts["values"] == 2
    assert max(counts.values()) <= 2, counts


def test_the_flat_spec_and_the_objects_build_the_same_model():
    flat = studies.ModelSpec(noise="scalar", engine="sde", solver="heun", dt=0.05, horizon=1.0)
    objects = StudyModel(engine=SDE(solver="heun", dt=0.05), noise=ScalarNoise(), horizon=1.0)
    assert flat.model == objects
    a, b = flat.model_fn()(**POINT, eps=0.3), objects.model(**POINT, eps=0.3)
    assert isinstance(a, HybridSDE) and isinstance(b, HybridSDE)
    assert repr(a) == repr(b) and float(a.eps) == float(b.eps) == pytest.approx(0.3)


def test_a_study_horizon_checks_only_what_depends_on_it():
    spec = studies.ModelSpec(engine="sde", dt=0.5)
    assert spec.model.horizon is None
    with pytest.raises(ad.ParameterError, match="horizon is not set"):
        spec.model.model(**POINT)
    timed = spec.for_study("evolution")
    assert timed.horizon == timed.model.horizon == 50.0
    with pytest.raises(
        ad.ParameterError, match=re.escape("dt=0.5 is larger than the horizon=0.25")
    ):
        spec.model.with_horizon(0.25)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: StudyModel(engine=SDE(), scheme="pre-ln"), "has no sde engine"),
        (lambda: StudyModel(engine=SDE(), norm="layernorm"), "defined for the discrete"),
        (lambda: StudyModel(engine=SDE(), noise=MatrixNoise(drift=1.0)), "no depth limit"),
        (lambda: StudyModel(tau=0.2), "applies to scheme='mix-ln' only"),
        (lambda: Discrete(depth=0), "depth"),
        (lambda: Discrete(step=-1.0), "step"),
        (lambda: SDE(solver="rk4"), "solver"),
        (lambda: MatrixNoise(sigma=0.0), "sigma"),
        (lambda: ScalarNoise(eps=-1.0), "eps"),
        (lambda: ScalarNoise(law="cauchy"), "values"),
        (lambda: studies.ModelSpec(noise="loud"), "noise='loud'"),
        (lambda: studies.ModelSpec(engine="sde", step=0.1), "step is the layer step"),
        (lambda: studies.ModelSpec(dt=0.5), "applies to engine='sde' only"),
    ],
)
def test_each_object_refuses_its_own_bad_fields(make, match):
    with pytest.raises(ad.ParameterError, match=match):
        make()


def test_the_modes_noises_build_through_the_spec():
    # What ModesSpec builds today (studies/modes.py), built from the spec's objects: the
    # level from the point, the flow without a draw, σ = 0 as the flow, the matrix noise
    # with the flow's drift, and its missing SDE refused.
    noises = {name: cls.added_to_flow(law=None) for name, cls in NOISE_CLASSES.items()}
    assert noises == {
        "none": NoNoise(as_scalar=False),
        "scalar": ScalarNoise(),
        "matrix": MatrixNoise(sigma=None, drift=1.0),
    }
    flow = StudyModel(noise=noises["none"], horizon=1.0).model(**POINT)
    assert isinstance(_discrete(flow).values, ad.DeterministicValues)
    drifted = StudyModel(noise=noises["matrix"], horizon=1.0)
    assert isinstance(_discrete(drifted.model(**POINT, sigma=0.0)).values, ad.DeterministicValues)
    values = _discrete(drifted.model(**POINT, sigma=0.5)).values
    assert repr(values) == repr(ad.MatrixValues(0.5, drift=1.0))
    assert [float(x) for x in _leaves(values)] == [0.5, 1.0]
    with pytest.raises(ad.ParameterError, match="needs sigma"):
        drifted.model(**POINT)
    sde = StudyModel(engine=SDE(dt=0.1), noise=ScalarNoise(), horizon=1.0)
    hybrid = sde.model(**POINT, eps=0.25)
    assert isinstance(hybrid, HybridSDE) and float(hybrid.eps) == 0.25
    assert ScalarNoise().point_level() == "eps" and MatrixNoise(sigma=None).point_level() == "sigma"
    assert MatrixNoise().point_level() is None and NoNoise().point_level() is None


def _discrete(model) -> ad.DiscreteTransformer:
    assert isinstance(model, ad.DiscreteTransformer)
    return model


@pytest.mark.parametrize(
    ("noise", "engine", "level"),
    [
        ("none", "discrete", 0.0),
        ("scalar", "discrete", 0.3),
        ("matrix", "discrete", 0.5),
        ("matrix", "discrete", 0.0),
        ("none", "sde", 0.0),
        ("scalar", "sde", 0.3),
    ],
)
def test_the_spec_builds_the_modes_studys_models(noise, engine, level):
    # The route for ModesSpec onto the spec: its engine by name, its noise added to the
    # flow, its level under the noise's point key. The same model, leaf for leaf.
    options: dict[str, Any] = {"dt": 0.1} if engine == "sde" else {"depth": 20}
    modes = studies.ModesSpec(noise=noise, engine=engine, horizon=1.0, saves=3, **options)
    study = StudyModel(
        engine=spec_module.engine_of(engine, **options),
        noise=NOISE_CLASSES[noise].added_to_flow(law=None),
        horizon=1.0,
        saveat=modes.saveat,
    )
    key = study.noise.point_level()
    built = study.model(**POINT, **({key: level} if key else {}))
    assert bool(eqx.tree_equal(built, modes.model(**POINT, level=level)))
