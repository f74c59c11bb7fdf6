from fractions import Fraction

import pytest

from kubemesh.services.model.quantities import format_bytes, format_cpu, int_value, milli_value, parse_quantity


@pytest.mark.parametrize(("text", "value"), [
    ("100m", Fraction(1, 10)), ("2", Fraction(2)), ("1.5", Fraction(3, 2)), ("1Gi", Fraction(2**30)),
    ("500M", Fraction(500_000_000)), ("1e3", Fraction(1000)), ("128Mi", Fraction(128 * 2**20)),
    (".5", Fraction(1, 2)), ("5.", Fraction(5)), ("-1k", Fraction(-1000)), ("+2", Fraction(2)),
    ("1E", Fraction(10**18)), ("1E3", Fraction(1000)), ("25e-2", Fraction(1, 4)), ("3n", Fraction(3, 10**9)),
    ("4u", Fraction(4, 10**6)), ("1Ei", Fraction(2**60)), (" 7Ki ", Fraction(7 * 1024)),
])
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "1Gb", "--1", "1.2.3", "1e3m", "Gi", "1 Gi", "1ki", "."])
def test_parse_quantity_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_numbers_are_read_as_their_decimal_text() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.1) == Fraction(1, 10)  # not the binary approximation of 0.1
    assert parse_quantity(1e20) == 10**20
    assert parse_quantity(True) == 1
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            parse_quantity(bad)


def test_rounding_is_up_as_kubernetes() -> None:
    assert milli_value(parse_quantity("0.0001")) == 1
    assert milli_value(parse_quantity("1.5")) == 1500
    assert milli_value(parse_quantity(0.1)) == 100
    assert int_value(parse_quantity("1.5")) == 2
    assert int_value(parse_quantity("100m")) == 1
    assert int_value(parse_quantity("1G")) == 10**9


def test_formatting() -> None:
    assert format_cpu(8000) == "8"
    assert format_cpu(7900) == "7900m"
    assert format_bytes(32 * 2**30) == "32Gi"
    assert format_bytes(31388 * 2**20) == "31388Mi"
    assert format_bytes(0) == "0"
    assert format_bytes(1000) == "1000"
