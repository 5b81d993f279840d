"""What a project's alert webhook receives: a Slack-compatible JSON body per alert, signed.

The body is what a Slack incoming webhook takes (``text``, the fallback line, and ``blocks``), with the alert as
data beside them (``alert``) for receivers that are programs. Each POST carries

- ``X-Attnprof-Timestamp``: the time it was signed, in Unix seconds;
- ``X-Attnprof-Signature``: ``v1=`` and the hex HMAC-SHA256, keyed with the webhook's secret, of the timestamp, a
  ``.`` and the body's bytes exactly as sent.

A receiver recomputes the HMAC over ``timestamp + "." + raw body``, compares it in constant time, and refuses a
timestamp more than five minutes away from its clock (a replayed request). docs/alerts.md ("Verifying a delivery")
shows it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from attnprof.core import units
from attnprof.server import outbound
from attnprof.server.comparisons.models import Alert
from attnprof.server.config import AlertWebhooks

SIGNATURE_HEADER = "X-Attnprof-Signature"
TIMESTAMP_HEADER = "X-Attnprof-Timestamp"
SIGNATURE_VERSION = "v1"
TOLERANCE_S = 300


@dataclass(frozen=True)
class AlertContext:
    """What an alert's message names beyond the row: its project, testbed and branch, the commits around the step,
    and the dashboard page that shows it."""

    project: str
    testbed: str
    branch: str
    last_good_commit: str
    last_good_at: datetime | None
    first_bad_commit: str
    first_bad_at: datetime | None
    url: str


def url_refusal(url: str, cfg: AlertWebhooks) -> str | None:
    """Why alerts may not be sent to ``url`` (its host is, or resolves now to, an address of the service's own
    network that ``cfg.allow_networks`` does not allow: ``attnprof.server.outbound``), or None. Checked again at each
    delivery."""
    return outbound.url_refusal(url, cfg.networks())


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Attnprof-Signature`` value of ``body`` sent at ``timestamp`` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={mac}"


def verify(
    secret: str, timestamp: str, body: bytes, signature: str, *, now: float, tolerance_s: int = TOLERANCE_S
) -> bool:
    """What a receiver does: the signature matches and the timestamp is within ``tolerance_s`` of ``now``."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, sent, body), signature)


def size(alert: Alert) -> str:
    """The step in the alert's unit, the unit once where both levels share it: ``+30.0% (87.8 → 114.1 µs)``,
    ``+12.0% (9,120 µs → 10.2 ms)``."""
    before, after = units.fmt_in_unit(alert.before, alert.unit), units.fmt_in_unit(alert.after, alert.unit)
    b_num, _, b_unit = before.partition(" ")
    if b_unit and after.endswith(f" {b_unit}"):
        before = b_num
    return f"{units.fmt_change(alert.change)} ({before} → {after})"


def interval(alert: Alert) -> str:
    """The 95% interval of the change and each level's spread: ``95% CI +28.1% to +31.9%; before 85.6 µs ± 0.31 µs
    (6 runs), after 111.3 µs ± 0.52 µs (6 runs)``."""
    parts = []
    if alert.ci_low is not None and alert.ci_high is not None:
        parts.append(f"95% CI {units.fmt_change(alert.ci_low)} to {units.fmt_change(alert.ci_high)}")
    levels = []
    for name, level, sd, runs in (
        ("before", alert.before, alert.before_sd, alert.before_runs),
        ("after", alert.after, alert.after_sd, alert.after_runs),
    ):
        text = f"{name} {units.fmt_in_unit(level, alert.unit)}"
        if sd is not None:
            text += f" ± {units.fmt_in_unit(sd, alert.unit)}"
        if runs:
            text += f" ({runs} runs)"
        levels.append(text)
    parts.append(", ".join(levels))
    return "; ".join(parts)


def headline(alert: Alert, ctx: AlertContext) -> str:
    what = "Regression" if alert.regression else "Improvement"
    if alert.culprit:
        return (
            f"{what}: {alert.metric} of {alert.case_id} on {ctx.branch} ({ctx.testbed}) {size(alert)}, "
            f"made by {alert.culprit[:10]} (bisected and confirmed)"
        )
    return (
        f"{what}: {alert.metric} of {alert.case_id} on {ctx.branch} ({ctx.testbed}) {size(alert)}, "
        f"between {ctx.last_good_commit[:10]} and {ctx.first_bad_commit[:10]}"
    )


def body(alert: Alert, ctx: AlertContext) -> dict[str, Any]:
    """The JSON body for ``alert``: Slack's ``text`` and ``blocks``, and the alert as data (``alert``)."""
    what = "Regression" if alert.regression else "Improvement"
    minimum = units.fmt_percent(alert.min_effect, digits=1) if alert.min_effect is not None else units.MISSING
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*{what}* in `{alert.case_id}` ({alert.metric}): *{size(alert)}*\n<{ctx.url}|Open the trend>",
            },
        },
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Project*\n{ctx.project}"},
                {"type": "mrkdwn", "text": f"*Testbed · branch*\n{ctx.testbed} · {ctx.branch}"},
                {"type": "mrkdwn", "text": f"*Last good commit*\n`{ctx.last_good_commit[:12]}`"},
                {"type": "mrkdwn", "text": f"*First bad commit*\n`{ctx.first_bad_commit[:12]}`"},
            ],
        },
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"{interval(alert)}; p {units.fmt_probability(alert.p)}; minimum effect {minimum}",
                }
            ],
        },
    ]
    if alert.culprit:
        blocks.insert(
            1,
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*Culprit* `{alert.culprit[:12]}`: bisected with paired jobs and confirmed against its "
                    "parent",
                },
            },
        )
    return {
        "text": headline(alert, ctx),
        "blocks": blocks,
        "alert": {
            "id": alert.id,
            "project": ctx.project,
            "testbed": ctx.testbed,
            "branch": ctx.branch,
            "case": alert.case_id,
            "metric": alert.metric,
            "unit": alert.unit,
            "regression": alert.regression,
            "before": alert.before,
            "after": alert.after,
            "before_sd": alert.before_sd,
            "after_sd": alert.after_sd,
            "change": alert.change,
            "ci": {"low": alert.ci_low, "high": alert.ci_high, "level": 0.95},
            "min_effect": alert.min_effect,
            "p": alert.p,
            "last_good": {"run_id": alert.before_run_id, "commit": ctx.last_good_commit},
            "first_bad": {"run_id": alert.run_id, "commit": ctx.first_bad_commit},
            "culprit": alert.culprit,
            "bisection_id": alert.bisection_id,
            "url": ctx.url,
        },
    }


def encode(payload: dict[str, Any]) -> bytes:
    """The bytes sent (and signed): compact JSON, UTF-8."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
