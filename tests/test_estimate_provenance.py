"""A direct ``estimate_probabilities`` call records the models' own fields
(:meth:`AbstractModel.provenance`: a layer map's ``depth`` or ``step``), as a study's
spec does, so that its figures' titles show L (issue 44 item 5: provenance read from
fields, never out of a repr)."""

from typing import Any

import jax

import attndyn as ad
from attndyn._core import defaults
from attndyn._estimate.plan import make_plan
from attndyn._estimate.reports import model_fields
from attndyn.plot._style import provenance_record, sample_line


def test_a_direct_call_records_the_models_depth_and_the_title_shows_it():
    # test_build_once's full-route model (d = 3, N = 2, L = 2, T = 1, 4 trajectories):
    # the same compiled programs. A direct call, no study: no metadata names the depth.
    model_fn = ad.studies.ModelSpec(depth=2, horizon=1.0).model_fn()
    points = [{"dim": 3, "n_tokens": 2, "beta": 0.5}]
    run: dict[str, Any] = dict(
        key=jax.random.key(0), n_trajectories=4, progress=False, route="full"
    )
    ds = ad.estimate_probabilities(model_fn, points, **run)
    record = provenance_record(ds)
    assert record["depth"] == 2
    assert "L = 2" in sample_line(ds)
    # The study's own fields come after the models' and name them again where they
    # record them: a study's metadata keeps the last word.
    ds = ad.estimate_probabilities(model_fn, points, metadata={"depth": 7}, **run)
    assert provenance_record(ds)["depth"] == 7


def _fields(model_fn, betas=(0.5, 1.5)):
    points = [{"dim": 3, "n_tokens": 2, "beta": beta} for beta in betas]
    options: dict[str, Any] = dict(
        n_trajectories=4, tol=1e-3, radius=1.0, chunk_size=None, route="full"
    )
    plan = make_plan(model_fn, points, early_absorption=False, on_nonfinite="raise", **options)
    return model_fields(plan)


def test_a_step_and_per_point_depths_are_recorded_as_the_models_give_them():
    # Built and planned only (nothing compiled): what the dataset would record.
    def layers(beta, dim, n_tokens, **grid):
        del dim, n_tokens
        return ad.DiscreteTransformer(ad.Attention(beta=beta), saveat=ad.SaveAt(1.0), **grid)

    assert _fields(lambda **p: layers(**p, step=0.5)) == {"step": 0.5}
    assert _fields(lambda **p: layers(**p)) == {"depth": defaults.DEPTH}
    # Models that differ: the field point by point; a field only some give, None elsewhere.
    assert _fields(lambda **p: layers(**p, depth=2 if p["beta"] < 1 else 4)) == {"depth": [2, 4]}
    mixed = _fields(lambda **p: layers(**p, **({"depth": 2} if p["beta"] < 1 else {"step": 0.5})))
    assert mixed == {"depth": [2, None], "step": [None, 0.5]}
