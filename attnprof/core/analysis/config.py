"""Minimum effects, false-discovery level and noise floors: defaults per mode, precedence, ``--config``.

Precedence, weakest first: the defaults of the candidate's mode, then the candidate's suite-level
``[suite.thresholds]``, then ``--config``, then the case's own ``thresholds``. ``--config`` beats the suite
table because it is the operator's say over a whole comparison (a stricter gate on a release branch, a
looser one on a noisy testbed); a case table still wins because it is the most specific statement, written
next to the one case whose noise its author knows.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from attnprof.core.documents.result import Mode, Thresholds
from attnprof.core.errors import DocumentError

PRECEDENCE = "defaults(mode) < suite.thresholds < --config < case.thresholds"

# Minimum relative effects. GPU: runs of unchanged code land within 0.5-1.4% of each other on the H200
# (separate processes), so 2% sits above that spread; see docs/regression-method.md. CPU: separate
# processes on a 2-core host spread +-20%, so CPU gates sit well above it. FDR 0.05: on H200-like noise
# the minimum effect, not the FDR level, keeps unchanged code from failing, and 0.01 lets only ~81% of 3%
# slowdowns through the test with three baseline runs (docs/regression-method.md).
DEFAULT_THRESHOLDS: dict[str, dict[str, float]] = {
    "cuda": {
        "latency": 0.02,
        "bandwidth": 0.02,
        "throughput": 0.02,
        "variance": 0.5,
        "dram_bytes": 0.10,
        "paired": 0.005,
        "fdr": 0.05,
    },
    "cpu": {
        "latency": 0.30,
        "bandwidth": 0.30,
        "throughput": 0.30,
        "variance": 1.0,
        "dram_bytes": 0.10,
        "paired": 0.10,
        "fdr": 0.05,
    },
}

# ``paired``: the minimum effect of a paired comparison (base and head interleaved in one job), where drift between
# processes and hours cancels in the pair differences, so the gate can sit far below the stored-history one: 0.5% on
# CUDA (bench/reports/h200-paired.md measures 1% slowdowns and A/A false alarms with it); on the 2-core CPU hosts,
# round medians of identical code in two processes differ by up to 2x while another process takes a core, so 10%.

# The pair spread (standard deviation of ln(head / base)) a paired run's set-aside test pools with the pairs it has,
# as a prior worth a few degrees of freedom (analysis.paired_stats.disturbed): on CUDA 1%, about the widest spread the
# H200 recordings of unchanged and planted cases show (0.24-1.17%), so that a pair one side of which a changed GPU
# state slowed by 19% is set aside at a case's first look, where three pairs alone could not tell it; none on the CPU
# hosts, whose pairs spread by tens of percent (docs/findings.md#disturbed-pairs-set-aside measured the rule without
# one).
PAIR_SPREAD_PRIOR: dict[str, float] = {"cuda": 0.01, "cpu": 0.0}

# Relative range of the medians of separate runs of unchanged code ("how far apart unchanged code lands").
# cuda: cuDNN 86.6-87.8 us over 6 processes (1.4%), the widest of the backends measured on the H200.
# cpu: 264-390 us and 5.7-6.7 ms across processes on the 2-core hosts; 0.30 sits between the two.
DEFAULT_NOISE_FLOOR: dict[str, float] = {"cuda": 0.015, "cpu": 0.30}

# The range of ~6 normal draws is ~2.5 standard deviations: converts a noise floor (a range) to the
# run-to-run standard deviation that the test needs.
RANGE_TO_SD = 2.5

# The noise floor counts as this many baseline runs when pooled with the observed between-run spread:
# the facts behind the defaults come from 6 processes.
PRIOR_RUNS = 6

# Run-to-run standard deviation of the log of a run's spread (mean absolute deviation): how much the
# spread of unchanged code moves between runs (clock state, occasional bimodal runs).
SPREAD_RUN_SD: dict[str, float] = {"cuda": 0.15, "cpu": 0.35}

TIMING_METRICS = ("latency", "bandwidth", "throughput")
_KEYS = tuple(Thresholds.model_fields)


@dataclass(frozen=True)
class Resolved:
    """Every threshold with a value: relative minimum effects and the false-discovery level."""

    latency: float
    bandwidth: float
    throughput: float
    variance: float
    dram_bytes: float
    paired: float
    fdr: float
    accuracy: float | None  # None: each document's own tolerance applies

    def minimum(self, metric: str) -> float:
        """The minimum relative effect for ``metric`` (a fraction)."""
        return float(getattr(self, metric))

    def as_dict(self) -> dict[str, float]:
        out = {k: float(getattr(self, k)) for k in (*TIMING_METRICS, "variance", "dram_bytes", "paired", "fdr")}
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        return out


def resolve(mode: Mode, *layers: Thresholds | None) -> Resolved:
    """Merge threshold layers over the defaults of ``mode``; later layers win, ``None`` fields are skipped."""
    values: dict[str, Any] = dict(DEFAULT_THRESHOLDS[mode])
    values["accuracy"] = None
    for layer in layers:
        if layer is None:
            continue
        for key, value in layer.model_dump(exclude_none=True).items():
            values[key] = value
    return Resolved(**values)


def default_noise_floor(mode: Mode) -> float:
    """The documented run-to-run noise floor of ``mode`` (a relative range, e.g. 0.015)."""
    return DEFAULT_NOISE_FLOOR[mode]


def load_config(path: str | Path) -> Thresholds:
    """Read a ``--config`` TOML file into ``Thresholds``.

    The file holds the same keys as a suite's thresholds table (``latency``, ``bandwidth``, ``throughput``,
    ``variance``, ``dram_bytes``, ``accuracy``: relative fractions; ``fdr``: a level in (0, 1)), either in a
    ``[thresholds]`` table, in ``[suite.thresholds]``, or at the top level. A bad file raises
    ``DocumentError`` naming the key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{p}: cannot read config: {exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DocumentError(f"{p}: not valid TOML: {exc}") from exc
    return parse_config(data, source=str(p))


def parse_config(data: dict[str, Any], *, source: str = "<config>") -> Thresholds:
    """Validate a decoded ``--config`` table; see ``load_config``."""
    table: Any = data
    prefix = ""
    if "suite" in data and set(data) == {"suite"}:
        suite = data["suite"]
        if not isinstance(suite, dict) or set(suite) != {"thresholds"}:
            raise DocumentError(f"{source}: suite: only suite.thresholds is read from a config file")
        table, prefix = suite["thresholds"], "suite.thresholds."
    elif "thresholds" in data:
        extra = sorted(set(data) - {"thresholds"})
        if extra:
            raise DocumentError(
                f"{source}: {extra[0]}: unknown key beside [thresholds]; allowed keys: {', '.join(_KEYS)}"
            )
        table, prefix = data["thresholds"], "thresholds."
    if not isinstance(table, dict):
        raise DocumentError(f"{source}: {prefix.rstrip('.') or 'thresholds'}: expected a table")
    for key in table:
        if key not in _KEYS:
            raise DocumentError(f"{source}: {prefix}{key}: unknown key; allowed keys: {', '.join(_KEYS)}")
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DocumentError(f"{source}: {prefix}{key}: expected a number, got {value!r}")
    try:
        return Thresholds.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(part) for part in err["loc"])
        raise DocumentError(f"{source}: {prefix}{key}: {err['msg']} (got {err.get('input')!r})") from exc
