"""The default run's selection (tests/conftest.py): `default_case` keeps the named cases of a
parametrized test, the others are slow, and a name that matches no case is an error."""

pytest_plugins = ["pytester"]

TESTS = """
import pytest

@pytest.mark.default_case("b")
@pytest.mark.parametrize("x", ["a", "b", "c"])
def test_named(x):
    pass

@pytest.mark.default_case()
@pytest.mark.parametrize("x", [1, 2])
def test_first(x):
    pass

@pytest.mark.parametrize("x", [1, 2])
def test_unmarked(x):
    pass
"""


def _run(pytester, source, *args):
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    default_case: default case\n")
    pytester.makepyfile(test_cases=source)
    plugins = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "tests._default_case")
    return pytester.runpytest_inprocess(*plugins, *args)


def test_default_run_keeps_the_named_or_first_case(pytester):
    result = _run(pytester, TESTS, "-m", "not slow", "-v")
    result.assert_outcomes(passed=4, deselected=3)
    result.stdout.fnmatch_lines(["*test_named?b? PASSED*", "*test_first?1? PASSED*"])
    slow = _run(pytester, TESTS, "-m", "slow", "-v")
    slow.assert_outcomes(passed=3, deselected=4)
    slow.stdout.fnmatch_lines(["*test_named?a? PASSED*", "*test_first?2? PASSED*"])


def test_a_default_case_that_names_no_case_stops_the_collection(pytester):
    result = _run(pytester, TESTS.replace('default_case("b")', 'default_case("z")'))
    assert result.ret != 0
    assert "test_cases.py::test_named: default_case ['z'] names no case" in result.stderr.str()
