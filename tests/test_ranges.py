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
