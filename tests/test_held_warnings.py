"""Warnings held while a study checks its arguments (:mod:`attndyn._estimate.held_warnings`):
shown in order once it runs, dropped when the arguments are refused, and without
``warnings.showwarning`` replaced by hand (issue 44: the CLI's holder swapped it
process-wide)."""

import warnings

import pytest

import attndyn as ad
from attndyn._estimate.held_warnings import deferred_warnings, release_warnings


class _Seen(UserWarning):
    pass


class _Quiet(UserWarning):
    pass


def test_held_until_the_study_runs_then_in_order_and_later_ones_at_once():
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        outside = warnings.showwarning
        with deferred_warnings():
            assert warnings.showwarning is outside  # nothing swapped by hand
            warnings.warn("first", _Seen, stacklevel=1)
            warnings.warn("second", _Seen, stacklevel=1)
            with deferred_warnings():  # nested: the outermost holds
                warnings.warn("third", _Seen, stacklevel=1)
            assert shown == []
            release_warnings()
            assert [str(w.message) for w in shown] == ["first", "second", "third"]
            warnings.warn("later", _Seen, stacklevel=1)
            assert [str(w.message) for w in shown][-1] == "later"
        assert warnings.showwarning is outside
    assert len(shown) == 4


def test_dropped_when_the_arguments_are_refused():
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with pytest.raises(ad.ParameterError), deferred_warnings():
            warnings.warn("off the layer grid", _Seen, stacklevel=1)
            raise ad.ParameterError("depth=0 must be >= 1")
    assert shown == []


def test_a_filter_set_inside_holds_after_the_release_and_ends_with_the_block():
    # The CLI ignores NumericalMergeWarning inside its block (it prints its own line).
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with deferred_warnings():
            warnings.simplefilter("ignore", _Quiet)
            warnings.warn("held", _Seen, stacklevel=1)
            release_warnings()
            warnings.warn("ignored", _Quiet, stacklevel=1)
        warnings.warn("outside", _Quiet, stacklevel=1)
    assert [str(w.message) for w in shown] == ["held", "outside"]
