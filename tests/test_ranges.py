import pytest

from attndyn import ParameterError
from attndyn.cli._ranges import parse_range


def test_ranges():
    assert parse_range("beta", "0:2:0.5") == [0, 0.5, 1.0, 1.5, 2.0]
    assert parse_range("beta", "0:1:0.3") == [0, 0.3, 0.6, 0.9]
    assert parse_range("dim", "4,6", integer=True) == [4, 6]
    assert parse_range("dim", "4:8:2", integer=True) == [4, 6, 8]
    assert parse_range("beta", "3") == [3.0]


@pytest.mark.parametrize("text", ["2:1:0.5", "0:1:0", "", "a,b", "1:2"])
def test_bad_ranges_name_the_parameter(text):
    with pytest.raises(ParameterError, match="--beta"):
        parse_range("beta", text)


@pytest.mark.parametrize(
    ("text", "values"),
    [
        # Rounded to 12 decimals, these ran 0, 1e-12, 2e-12, 4e-12 and "listed 0 twice".
        ("0:3.6e-12:1.2e-12", [0.0, 1.2e-12, 2.4e-12, 3.6e-12]),
        ("0:3e-13:1e-13", [0.0, 1e-13, 2e-13, 3e-13]),
        ("0:0.7:0.1", [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
        ("1e-320:3e-320:1e-320", [1e-320, 2e-320, 3e-320]),
        ("-1:1:0.5", [-1.0, -0.5, 0.0, 0.5, 1.0]),
    ],
)
def test_range_values_are_the_decimals_written(text, values):
    # Each value is the float nearest to the exact decimal a + i·step.
    assert parse_range("beta", text) == values


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("0:1e308:1e-308", "more than 100000 values"),
        ("1:1.0000000000000000001:1e-19", "lists 1 more than once"),  # equal as floats
    ],
)
def test_ranges_too_long_or_finer_than_floats_are_refused(text, needle):
    with pytest.raises(ParameterError, match=needle):
        parse_range("beta", text)
