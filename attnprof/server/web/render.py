"""Templates and formatting: Jinja2 with autoescaping, filters that put units on numbers, chart specs as JSON."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from functools import lru_cache
from importlib.metadata import version
from typing import Any

import pydantic_core
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from attnprof.contract.links import PATHS
from attnprof.core import units
from attnprof.core.analysis.changepoints import METRICS as CHANGEPOINT_UNITS

# Okabe and Ito's palette, which stays distinct under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
VERDICT_COLOURS = {"pass": "#009E73", "warn": "#E69F00", "fail": "#D55E00"}


def fmt_us(value: float | None) -> str:
    """A duration given in microseconds: µs below 10 ms, ms from there, s from 1 s (``attnprof.core.units``)."""
    return units.fmt_duration_us(value)


def fmt_num(value: float | None) -> str:
    """A plain number to about three significant figures (``2.33``), thousands separated, never in exponent form."""
    return units.fmt_number(value)


def fmt_pct(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """A fraction as a percentage (0.123 → 12.3%); ``signed``: a relative change (+6.6%, −0.3%)."""
    return units.fmt_change(value, digits=digits) if signed else units.fmt_percent(value, digits=digits)


def fmt_error(value: float | None) -> str:
    """An accuracy error (absolute or relative to the reference): it spans decades, so in scientific form (2.1e-07)."""
    if value is None or not math.isfinite(value):
        return units.MISSING
    return f"{value:.2g}"


def fmt_metric(value: float | None, metric: str) -> str:
    """A value of a change-point metric (``latency``, ``bandwidth``...) in that metric's unit: ``10.4 ms``."""
    return units.fmt_in_unit(value, CHANGEPOINT_UNITS.get(metric))


def fmt_time(value: datetime | str | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def short(sha: str | None, n: int = 10) -> str:
    return (sha or "")[:n] or "–"


def to_json(value: Any) -> Markup:
    """JSON for a ``<script type="application/json">`` block; ``</`` is escaped so data can never end the block."""
    text = pydantic_core.to_json(value).decode()
    return Markup(text.replace("</", "<\\/"))


@lru_cache(maxsize=1)
def plotly_version() -> str:
    return version("plotly")


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("attnprof.server.web", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        us=fmt_us,
        us_range=units.fmt_duration_range_us,
        us_delta=units.fmt_duration_delta_us,
        num=fmt_num,
        pct=fmt_pct,
        gbps=units.fmt_gbps,
        tflops=units.fmt_tflops,
        p=units.fmt_probability,
        in_unit=units.fmt_in_unit,
        metric=fmt_metric,
        error=fmt_error,
        when=fmt_time,
        short=short,
        tojson_script=to_json,
    )
    env.globals.update(verdict_colours=VERDICT_COLOURS, palette=PALETTE, plotly_version=plotly_version(), links=PATHS)
    return env


def page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render ``templates/<name>`` with ``context``."""
    html = environment().get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})
