"""How every duration, rate, change and plain number reads to a person: the CLI, the dashboard and the PR comment.

The one place these rules live (torch-free, standard library only):

- **Durations** are given in microseconds and print in µs below 10 ms, in ms from 10 ms, in s from 1 s:
  ``0.0634 µs``, ``8.54 µs``, ``85.6 µs``, ``342.5 µs``, ``3,418 µs``, ``10.4 ms``, ``342.5 ms``, ``1.24 s``,
  ``1,000 s``. Kernel times up to 10 ms stay in µs, where they compare at a glance (``3,428 → 3,654 µs``).
  Within a unit: two decimals below 10, one below 1,000, none from 1,000 (thousands separated); below 1, three
  significant digits. So 3 or 4 significant digits, never exponent notation.
- **Rates**: ``fmt_gbps`` (``3,350 GB/s``) and ``fmt_tflops`` (TFLOP/s from 1 TFLOP/s, GFLOP/s below, as a
  CPU's are), about three significant digits (``4,270`` · ``187`` · ``18.7`` · ``1.97`` · ``0.063``).
- **Relative changes** are signed, with a true minus: ``+6.6%``, ``−0.3%``, ``+208%`` (one decimal below 100%,
  none from there; ``0.0%`` unsigned). **Fractions** as percentages: ``45%`` (``digits`` decimals).
- **Ratios** ``2.33×``; **plain numbers** to about three significant digits (``2.33``, never
  ``2.3333333333333335``); **probabilities** (p, q values) to two significant digits, ``< 0.0001`` below that.

A missing or non-finite value prints as ``—``. Every function takes ``ascii=True`` for the places that promise
ASCII (the comparison table in CI logs): ``us``, ``-`` for the minus and for a missing value, ``x`` for ×.
"""

from __future__ import annotations

import math

__all__ = [
    "MISSING",
    "fmt_change",
    "fmt_duration_delta_us",
    "fmt_duration_range_us",
    "fmt_duration_us",
    "fmt_gbps",
    "fmt_in_unit",
    "fmt_number",
    "fmt_percent",
    "fmt_probability",
    "fmt_ratio",
    "fmt_tflops",
]

MISSING = "—"
MINUS = "\u2212"

# (scale in µs, unit, ascii unit, the value in µs from which it is used)
_DURATION_UNITS = (
    (1.0, "µs", "us", 0.0),
    (1e3, "ms", "ms", 1e4),
    (1e6, "s", "s", 1e6),
)


def _missing(ascii: bool) -> str:
    return "-" if ascii else MISSING


def _decimals(magnitude: float) -> int:
    """Decimals for a non-negative number in its unit: none from 1,000, one from 10, two from 1, 3 significant below."""
    if magnitude >= 1000:
        return 0
    if magnitude >= 10:
        return 1
    if magnitude >= 1 or magnitude == 0:
        return 2
    return 2 - math.floor(math.log10(magnitude))


def _fixed(magnitude: float) -> str:
    """A non-negative number with the decimals its (rounded) size calls for, thousands separated."""
    decimals = _decimals(magnitude)
    text = f"{magnitude:,.{decimals}f}"
    # Rounding may carry into the next band (9.996 → "10.00"): format again at the rounded size.
    rounded = float(text.replace(",", ""))
    if _decimals(rounded) != decimals:
        text = f"{rounded:,.{_decimals(rounded)}f}"
    return text


def _sign(value: float, ascii: bool) -> str:
    if value > 0:
        return "+"
    if value < 0:
        return "-" if ascii else MINUS
    return ""


def _duration_magnitude(magnitude_us: float, ascii: bool) -> str:
    """A non-negative duration in µs, in the unit that reads best (the unit is chosen on the rounded value)."""
    index = max(i for i, (_, _, _, start) in enumerate(_DURATION_UNITS) if magnitude_us >= start)
    while True:
        scale, unit, ascii_unit, _ = _DURATION_UNITS[index]
        text = _fixed(magnitude_us / scale)
        nxt = index + 1
        # 9,999.7 µs rounds to "10,000 µs": that is 10.0 ms.
        if nxt < len(_DURATION_UNITS) and float(text.replace(",", "")) * scale >= _DURATION_UNITS[nxt][3]:
            index = nxt
            continue
        return f"{text} {ascii_unit if ascii else unit}"


def fmt_duration_us(value_us: float | None, *, ascii: bool = False) -> str:
    """A duration given in microseconds: ``85.6 µs``, ``3,418 µs``, ``10.4 ms``, ``1.24 s`` (rules: module doc).

    A negative duration (a difference) keeps its sign: ``−208 µs``.
    """
    if value_us is None or not math.isfinite(value_us):
        return _missing(ascii)
    sign = _sign(value_us, ascii) if value_us < 0 else ""
    return sign + _duration_magnitude(abs(value_us), ascii)


def fmt_duration_delta_us(delta_us: float | None, *, ascii: bool = False) -> str:
    """A change of duration given in microseconds, always signed: ``+208 µs``, ``−1.20 ms``, ``0.00 µs``."""
    if delta_us is None or not math.isfinite(delta_us):
        return _missing(ascii)
    text = _duration_magnitude(abs(delta_us), ascii)
    return (_sign(delta_us, ascii) if float(text.split()[0].replace(",", "")) else "") + text


def fmt_duration_range_us(low_us: float | None, high_us: float | None, *, ascii: bool = False) -> str:
    """A range of durations given in microseconds (a p25–p75 spread), the unit once where both share it:
    ``84.2–86.1 µs``, ``9,998 µs–10.1 ms``."""
    low, high = fmt_duration_us(low_us, ascii=ascii), fmt_duration_us(high_us, ascii=ascii)
    dash = "-" if ascii else "–"
    low_parts, high_parts = low.split(" "), high.split(" ")
    if len(low_parts) == 2 and len(high_parts) == 2 and low_parts[1] == high_parts[1]:
        return f"{low_parts[0]}{dash}{high}"
    return f"{low}{dash}{high}"


def _figures(x: float) -> str:
    """About three significant figures for a non-negative number: 4,270 · 187 · 18.7 · 1.97 · 0.063 · 0.00012."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    if x == 0:
        return "0"
    # Two significant digits below 1, written out (the ``g`` format would switch to 1.2e-05).
    decimals = 1 - math.floor(math.log10(x))
    return f"{x:.{decimals}f}"


def _signed_figures(x: float, ascii: bool) -> str:
    return (_sign(x, ascii) if x < 0 else "") + _figures(abs(x))


def fmt_number(value: float | None, *, ascii: bool = False) -> str:
    """A plain number (a count, a launch rate, a ratio without its ×) to about three significant figures: ``2.33``."""
    if value is None or not math.isfinite(value):
        return _missing(ascii)
    if float(value).is_integer() and abs(value) < 1e15:
        return (_sign(value, ascii) if value < 0 else "") + f"{abs(int(value)):,}"
    return _signed_figures(value, ascii)


def fmt_gbps(gbps: float | None, *, ascii: bool = False) -> str:
    """A bandwidth given in GB/s: ``3,350 GB/s``, ``0.96 GB/s``."""
    if gbps is None or not math.isfinite(gbps):
        return _missing(ascii)
    return f"{_signed_figures(gbps, ascii)} GB/s"


def fmt_tflops(tflops: float | None, *, ascii: bool = False) -> str:
    """A FLOP rate given in TFLOP/s, written in GFLOP/s below 1 TFLOP/s (a CPU's): ``187 GFLOP/s``, not ``0.2``."""
    if tflops is None or not math.isfinite(tflops):
        return _missing(ascii)
    if abs(tflops) >= 1:
        return f"{_signed_figures(tflops, ascii)} TFLOP/s"
    return f"{_signed_figures(tflops * 1000, ascii)} GFLOP/s"


def fmt_change(fraction: float | None, *, digits: int = 1, ascii: bool = False) -> str:
    """A relative change given as a fraction, signed: ``+6.6%``, ``−0.3%``, ``+208%`` (no decimals from 100%)."""
    if fraction is None or not math.isfinite(fraction):
        return _missing(ascii)
    pct = abs(fraction) * 100
    text = f"{pct:,.{0 if pct >= 99.95 else digits}f}"
    if float(text.replace(",", "")) == 0:
        return f"{text}%"
    return f"{_sign(fraction, ascii)}{text}%"


def fmt_percent(fraction: float | None, *, digits: int = 0, ascii: bool = False) -> str:
    """A fraction (a utilisation, a share) as a percentage: ``0.453`` → ``45%`` (``45.3%`` with ``digits=1``)."""
    if fraction is None or not math.isfinite(fraction):
        return _missing(ascii)
    sign = _sign(fraction, ascii) if fraction < 0 else ""
    return f"{sign}{abs(fraction) * 100:,.{digits}f}%"


def fmt_ratio(ratio: float | None, *, ascii: bool = False) -> str:
    """A ratio, to about three significant figures: ``2.33×``, ``0.61×``."""
    if ratio is None or not math.isfinite(ratio):
        return _missing(ascii)
    return _signed_figures(ratio, ascii) + ("x" if ascii else "×")


def fmt_probability(p: float | None, *, ascii: bool = False) -> str:
    """A p or q value, to two significant digits: ``0.012``, ``0.5``; ``< 0.0001`` below that."""
    if p is None or not math.isfinite(p):
        return _missing(ascii)
    if p < 1e-4:
        return "< 0.0001" if p > 0 else "0"
    if p >= 1:
        return f"{p:.2g}"
    decimals = 1 - math.floor(math.log10(p))
    return f"{p:.{decimals}f}".rstrip("0").rstrip(".")


def fmt_in_unit(value: float | None, unit: str | None, *, ascii: bool = False) -> str:
    """A metric's value in the unit a comparison finding or a trend names: ``us`` (a duration in µs), ``GB/s``,
    ``TFLOP/s``, ``fraction`` (a percentage), ``bytes`` (MB), anything else as a plain number with that unit."""
    if value is None or not math.isfinite(value):
        return _missing(ascii)
    if unit == "us":
        return fmt_duration_us(value, ascii=ascii)
    if unit == "GB/s":
        return fmt_gbps(value, ascii=ascii)
    if unit == "TFLOP/s":
        return fmt_tflops(value, ascii=ascii)
    if unit == "fraction":
        return fmt_percent(value, digits=2, ascii=ascii)
    if unit == "bytes":
        return f"{fmt_number(value / 1e6, ascii=ascii)} MB"
    return f"{fmt_number(value, ascii=ascii)} {unit or ''}".rstrip()
