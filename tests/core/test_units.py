"""The one formatter of durations, rates, changes and numbers: its examples, its thresholds, and properties over
every magnitude a kernel or a case can take (no exponent notation, at most four significant digits)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnprof.core.units import (
    fmt_change,
    fmt_duration_delta_us,
    fmt_duration_range_us,
    fmt_duration_us,
    fmt_gbps,
    fmt_number,
    fmt_percent,
    fmt_probability,
    fmt_ratio,
    fmt_tflops,
)

DURATIONS_US = st.floats(min_value=1e-3, max_value=1e9, allow_nan=False, allow_infinity=False)
DURATION = re.compile(r"^(−)?([\d,]+(?:\.\d+)?) (µs|ms|s)$")
SCALE = {"µs": 1.0, "ms": 1e3, "s": 1e6}


def significant_digits(number: str) -> int:
    digits = number.replace(",", "").replace(".", "").lstrip("0")
    return len(digits) or 1


@pytest.mark.parametrize(
    ("us", "text"),
    [
        (0.001, "0.00100 µs"),
        (0.0634, "0.0634 µs"),
        (8.54, "8.54 µs"),
        (85.64, "85.6 µs"),
        (342.46, "342.5 µs"),
        (3417.6, "3,418 µs"),
        (9999.4, "9,999 µs"),
        (9999.7, "10.0 ms"),  # rounds to 10,000 µs: the next unit
        (10412.0, "10.4 ms"),
        (342_460.0, "342.5 ms"),
        (999_990.0, "1.00 s"),
        (1_240_000.0, "1.24 s"),
        (1e9, "1,000 s"),
        (0.0, "0.00 µs"),
        (-208.3, "−208.3 µs"),
        (None, "—"),
        (math.nan, "—"),
    ],
)
def test_durations_read_in_us_below_10_ms_then_ms_then_s(us: float | None, text: str) -> None:
    assert fmt_duration_us(us) == text


def test_ascii_durations_and_deltas_for_ci_logs() -> None:
    assert fmt_duration_us(10412.0, ascii=True) == "10.4 ms"
    assert fmt_duration_us(85.64, ascii=True) == "85.6 us"
    assert fmt_duration_delta_us(-10412.0, ascii=True) == "-10.4 ms"
    assert fmt_duration_us(None, ascii=True) == "-"
    assert fmt_duration_delta_us(208.0) == "+208.0 µs" and fmt_duration_delta_us(-1200.0) == "−1,200 µs"
    assert fmt_duration_delta_us(0.0) == "0.00 µs"


def test_a_range_names_its_unit_once_where_both_ends_share_it() -> None:
    assert fmt_duration_range_us(84.21, 86.14) == "84.2–86.1 µs"
    assert fmt_duration_range_us(9998.0, 10100.0) == "9,998 µs–10.1 ms"
    assert fmt_duration_range_us(None, 5.0) == "—–5.00 µs"
    assert fmt_duration_range_us(84.21, 86.14, ascii=True) == "84.2-86.1 us"


@pytest.mark.parametrize(
    ("fraction", "text"),
    [(0.066, "+6.6%"), (-0.003, "−0.3%"), (0.61, "+61.0%"), (2.08, "+208%"), (0.0, "0.0%"), (-0.00001, "0.0%")],
)
def test_relative_changes_are_signed_with_a_true_minus(fraction: float, text: str) -> None:
    assert fmt_change(fraction) == text


def test_rates_percentages_ratios_numbers_and_probabilities() -> None:
    assert (
        fmt_tflops(0.187) == "187 GFLOP/s"
        and fmt_tflops(989.4) == "989 TFLOP/s"
        and fmt_tflops(40.23) == "40.2 TFLOP/s"
    )
    assert fmt_gbps(3350.2) == "3,350 GB/s" and fmt_gbps(0.958) == "0.96 GB/s"
    assert fmt_percent(0.453) == "45%" and fmt_percent(0.453, digits=1) == "45.3%"
    assert fmt_ratio(2.3333333333333335) == "2.33×" and fmt_ratio(2.333, ascii=True) == "2.33x"
    assert fmt_number(2.3333333333333335) == "2.33" and fmt_number(12.0) == "12" and fmt_number(1e-5) == "0.000010"
    assert fmt_number(4270.4) == "4,270"
    assert fmt_probability(0.01234) == "0.012" and fmt_probability(3e-9) == "< 0.0001" and fmt_probability(0.5) == "0.5"


@given(DURATIONS_US)
def test_no_duration_has_an_exponent_or_more_than_four_significant_digits(us: float) -> None:
    for text in (fmt_duration_us(us), fmt_duration_us(us, ascii=True), fmt_duration_delta_us(-us)):
        assert not re.search(r"e[+-]", text), text
        assert "e" not in text.split()[0], text
    match = DURATION.match(fmt_duration_us(us))
    assert match, fmt_duration_us(us)
    number, unit = match.group(2), match.group(3)
    assert significant_digits(number) <= 4, number
    # the unit: µs below 10 ms, ms below 1 s, s from there (decided on the rounded value)
    shown_us = float(number.replace(",", "")) * SCALE[unit]
    assert (unit == "µs") == (shown_us < 1e4)
    assert (unit == "s") == (shown_us >= 1e6)
    # and it says the value it was given, to its rounding
    assert math.isclose(shown_us, us, rel_tol=0.006), (us, number, unit)


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_no_number_rate_or_change_has_an_exponent(x: float) -> None:
    for text in (fmt_number(x), fmt_gbps(x), fmt_tflops(x), fmt_change(x / 1e6), fmt_percent(x / 1e6), fmt_ratio(x)):
        assert not re.search(r"\de[+-]?\d", text), text
        assert "inf" not in text and "nan" not in text
