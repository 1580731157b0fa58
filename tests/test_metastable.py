"""The plateau detector of the metastable staircase (attndyn.studies.metastable) on
synthetic step functions whose plateaus are known exactly: pure NumPy, no JAX, cheap."""

import numpy as np
import pytest

from attndyn import ParameterError
from attndyn.studies import Plateau, plateau_summary, plateaus

# 101 saves, 20 a decade, from 0.1 to 10⁴: consecutive saves a factor 10^0.05 apart.
T = np.logspace(-1, 4, 101)


def _steps(levels):
    """Counts that take value k from t ≥ start: ``levels`` = [(start, k), ...]."""
    c = np.zeros(T.size, dtype=np.int32)
    for start, k in levels:
        c[T >= start * (1 - 1e-12)] = k
    return c


def _mid(a, b):
    return float(np.sqrt(a * b))


def test_a_three_step_staircase_is_found_with_its_entries_and_exits():
    # a chained cloud (1), a formation peak (20), then 6, 5, 4 clusters.
    c = _steps([(0.1, 1), (3.1622776601683795, 20), (10, 6), (100, 5), (1000, 4)])
    found = plateaus(T, c)
    assert [p.value for p in found] == [6, 5, 4]
    six, five, four = found
    i10, i100 = (int(np.argmin(abs(T - x))) for x in (10, 100))
    assert six.entry == pytest.approx(_mid(T[i10 - 1], T[i10]))
    assert six.exit == pytest.approx(_mid(T[i100 - 1], T[i100]))
    assert five.lifetime == pytest.approx(five.exit - five.entry)
    assert not six.censored and not five.censored
    assert four.censored and four.exit == T[-1]


def test_a_run_shorter_than_the_factor_is_no_plateau():
    # 6 clusters from t = 10 to just before t = 20 (its first and last saves a factor
    # 10^0.25 ≈ 1.78 apart), then 5: with factor 3 only the 5 is a plateau; with factor
    # 1.5 both are.
    c = _steps([(0.1, 1), (7, 30), (10, 6), (20, 5)])
    assert [p.value for p in plateaus(T, c)] == [5]
    assert [p.value for p in plateaus(T, c, factor=1.5)] == [6, 5]


def test_the_factor_is_measured_between_the_runs_first_and_last_saves():
    # A run over saves i … i + 5 spans exactly 10^0.25 in t.
    i = 40
    c = np.full(T.size, 2, dtype=np.int32)
    c[:i] = 9
    c[i : i + 6] = 7
    span = T[i + 5] / T[i]
    assert [p.value for p in plateaus(T, c, factor=span * (1 - 1e-9))] == [9, 7, 2]
    assert [p.value for p in plateaus(T, c, factor=span * (1 + 1e-9))] == [9, 2]


def test_the_chained_cloud_before_the_start_is_ignored_unless_asked():
    c = _steps([(0.1, 1), (5, 12), (10, 3)])
    assert [p.value for p in plateaus(T, c)] == [3]
    assert [p.value for p in plateaus(T, c, start=0)] == [1, 3]
    first = plateaus(T, c, start=0)[0]
    assert first.entry == T[0]  # a run from the first save enters there
    # A start given after the peak: the 3 is entered at the midpoint before t = 10.
    i10 = int(np.argmin(abs(T - 10)))
    late = plateaus(T, c, start=i10)
    assert [p.value for p in late] == [3]
    assert late[0].entry == pytest.approx(_mid(T[i10 - 1], T[i10]))


def test_a_count_that_never_holds_has_no_plateau():
    c = np.arange(T.size, 0, -1).astype(np.int64)  # one merge every save
    assert plateaus(T, c) == []


@pytest.mark.parametrize(
    ("times", "counts", "factor"),
    [
        (T[::-1], np.ones(T.size, int), 3.0),  # decreasing times
        (T - 1, np.ones(T.size, int), 3.0),  # a time ≤ 0
        (T, np.ones(T.size - 1, int), 3.0),  # lengths differ
        (T, np.full(T.size, -1), 3.0),  # attndyn.clusters' non-finite sentinel
        (T, np.ones(T.size), 3.0),  # floats, not counts
        (T, np.ones(T.size, int), 1.0),  # factor ≤ 1
        (T, np.ones(T.size, int), float("nan")),
    ],
)
def test_bad_input_is_refused(times, counts, factor):
    with pytest.raises(ParameterError):
        plateaus(times, counts, factor=factor)


@pytest.mark.parametrize("start", [-1, T.size])
def test_a_start_outside_the_saves_is_refused(start):
    with pytest.raises(ParameterError, match="start"):
        plateaus(T, np.ones(T.size, int), start=start)


def test_the_summary_needs_one_start_per_trajectory():
    with pytest.raises(ParameterError, match="starts"):
        plateau_summary(T, np.ones((2, T.size), int), starts=[0])


def test_the_summary_counts_who_reached_what_and_averages_in_log_time():
    a = _steps([(0.1, 1), (5, 40), (10, 6), (100, 5)])  # 6 then 5 (censored)
    b = _steps([(0.1, 1), (5, 40), (10, 6), (1000, 4)])  # 6 then 4 (censored)
    d = _steps([(0.1, 1), (5, 40), (10, 5), (10**3.5, 4)])  # 5 then 4
    s = plateau_summary(T, np.stack([a, b, d]))
    assert s["first"]["values"] == [6, 6, 5]
    mean, se = s["first"]["value"]
    assert mean == pytest.approx(17 / 3)
    assert se == pytest.approx(np.std([6, 6, 5], ddof=1) / np.sqrt(3))
    six, five, four = s["by_value"][6], s["by_value"][5], s["by_value"][4]
    assert (six["reached"], six["of"], six["censored"]) == (2, 3, 0)
    assert (five["reached"], five["censored"]) == (2, 1)
    assert (four["reached"], four["censored"]) == (2, 2) and "log10_lifetime" not in four
    # 6 clusters: exits near 10² and 10³ (the midpoints half a save below).
    exits = [plateaus(T, x)[0].exit for x in (a, b)]
    assert six["log10_exit"][0] == pytest.approx(np.mean(np.log10(exits)))
    assert six["log10_exit"][1] == pytest.approx(np.std(np.log10(exits), ddof=1) / np.sqrt(2))
    # 5 clusters: only d's closes; one value has no standard error.
    assert np.isnan(five["log10_lifetime"][1])
    assert s["per_trajectory"][0][0] == tuple(plateaus(T, a)[0])


def test_a_trajectory_without_a_plateau_is_counted_as_not_reaching_one():
    flat = np.arange(T.size, 0, -1)
    s = plateau_summary(T, np.stack([flat, _steps([(0.1, 1), (1, 9), (10, 3)])]))
    assert (s["first"]["reached"], s["first"]["of"]) == (1, 2)
    assert s["by_value"][3]["reached"] == 1


def test_a_plateau_is_a_named_tuple_with_a_lifetime():
    p = Plateau(3, 10.0, 250.0, False)
    assert p.lifetime == 240.0 and tuple(p) == (3, 10.0, 250.0, False)


@pytest.mark.slow
def test_the_staircase_experiment_runs_quick(tmp_path):
    """A smoke run of experiments/metastable_staircase.py --quick (~30 s CPU): it finishes,
    no trajectory fails, the counts do not depend on the tolerance nor on the route after
    the clusters form, float64 changes no count, and every point has a first plateau."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "metastable_staircase.py"
    child = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads((tmp_path / "metastable_staircase_quick.json").read_text())
    assert (tmp_path / "metastable_staircase_quick.png").exists()
    assert all(same == 1.0 for same in out["float64_check"]["fraction_of_saves_equal"])
    for point in out["points"]:
        assert point["failed"] == 0 and point["trajectories"] >= 1
        assert all(v == 1.0 for v in point["agreement_after_t30"].values())
        assert point["plateaus"]["first"]["reached"] == point["trajectories"]
