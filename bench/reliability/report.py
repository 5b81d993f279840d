"""The report, bench/reports/reliability.md, from the scenarios' JSON (raw files, or the summary a report wrote), and
the committed summary beside it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.reliability.common import SCENARIOS, SWEEP, say
from bench.reliability.figures import TITLES, verdict
from bench.reliability.sections import FIGURES, SECTIONS


def load_results(source: Path) -> dict[str, dict[str, Any]]:
    """Each scenario's JSON, in the order of ``SCENARIOS``: from a folder of raw files (``NAME.json``), or from a
    summary a report wrote (``summary.json``, every scenario in one file)."""
    if source.is_file():
        summary = json.loads(source.read_text())
        return {name: summary[name] for name in SCENARIOS if name in summary}
    found = {}
    for name in SCENARIOS:
        path = source / f"{name}.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    return found


def summary_rows(data: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(scenario, the figure in words, whether the rule held) for the summary table."""
    rows: list[tuple[str, str, bool | None]] = []
    for name in SCENARIOS:
        if name not in data:
            rows.append((TITLES[name], "not run", None))
            continue
        r = data[name]["result"]
        if "error" in r:
            rows.append((TITLES[name], f"the scenario broke: {r['error']}", False))
            continue
        rows.append((TITLES[name], *FIGURES[name](r)))
    return rows


def _found_worker_exits(data: dict[str, dict[str, Any]]) -> list[str]:
    redis = data.get("redis", {}).get("result", {}).get("cases", {})
    exits = [(k, x) for k, c in redis.items() for x in c.get("restarts", [])]
    if not exits:
        return []
    v = data["redis"].get("versions", {})
    return [
        f"**An analysis worker exits when Redis goes away while it holds a message** ({len(exits)} exit(s) in "
        f"this run: {', '.join(sorted({k.replace('_', ' ') for k, _ in exits}))}). Celery "
        f"{v.get('celery', '?')} / kombu {v.get('kombu', '?')}, `--pool=threads`: the consumer sees the lost "
        "connection, restores its unacknowledged message while closing the channel, and the channel's client "
        "is already gone: `Unrecoverable error: AttributeError(\"'NoneType' object has no attribute "
        "'hostname'\")` (kombu `redis.py` `_connparams`, from `restore_unacked_once`). The running task still "
        "finishes (the job is not lost), then the process exits, **with exit code 0**, and beat (the sweeper) "
        "with it: nothing is resent until the worker is started again. docker-compose's `restart: "
        "unless-stopped` starts it again; a supervisor that restarts only on failure (systemd "
        "`Restart=on-failure`) "
        "would not. The profile workers (`--pool=solo`) rode out every Redis kill. To see it: "
        "`.venv/bin/python -m bench.reliability redis` (case *kill mid analysis*: an analysis held 8 s by "
        "`ATTNPROF_ANALYSIS__PAUSE_S`, Redis killed, its log ends with the line above)."
    ]


def _found_requests(data: dict[str, dict[str, Any]]) -> list[str]:
    """Bad inputs not refused as they must be, isolation probes likewise, server errors Schemathesis found."""
    out = []
    for row in data.get("bad-inputs", {}).get("result", {}).get("not_ok", []):
        what = (
            "was not refused"
            if not row["refused"]
            else (
                "changed " + str(row["changed"])
                if row["changed"]
                else f"is refused ({row['status']}) but the message does not name the field: "
                f"`{(row['detail'] or row.get('body', ''))[:140]}`"
            )
        )
        out.append(f"Bad input *{row['input']}* {what}.")
    for row in data.get("isolation", {}).get("result", {}).get("not_ok", []):
        out.append(f"Isolation probe *{row['probe']}* answered {row['status']}: `{row.get('detail', '')[:140]}`.")
    for key in ("public", "internal"):
        for ex in data.get("schemathesis", {}).get("result", {}).get(key, {}).get("server_error_examples", []):
            out.append(
                f"Schemathesis: {ex['operation']} answered {ex['status']}: `{ex['body'][:140]}`; `{ex['curl'][:300]}`."
            )
    return out


def _found_postgres(data: dict[str, dict[str, Any]]) -> list[str]:
    pg = data.get("postgres", {}).get("result", {})
    if not pg:
        return []
    out = []
    st = pg["storm"]
    for key, words in (
        ("accepted_lost", "accepted and not stored"),
        ("refused_but_stored", "refused and stored"),
        ("stored_twice", "stored twice"),
        ("plain_text_500", "answered a plain-text 500"),
    ):
        if st.get(key):
            out.append(f"Postgres restart: {len(st[key])} submission(s) {words}: {st[key][:3]}.")
    for w in pg["submit_wait"]:
        if not w["ok"]:
            out.append(f"`attnprof submit --wait` with Postgres stopped at its {w['when']} exited {w['exit_code']}.")
    return out


def _found_tries_and_tests(data: dict[str, dict[str, Any]]) -> list[str]:
    """Kill tries that did not end as they must, and the jail's tests that did not pass."""
    out = []
    for name in ("profile-kill", "analysis-kill"):
        for i, t in enumerate(data.get(name, {}).get("result", {}).get("tries", []), 1):
            if not t.get("ok"):
                out.append(
                    f"{TITLES[name]}, try {i}: "
                    f"{t.get('error') or {k: t.get(k) for k in ('status', 'runs', 'comparisons', 'kill_to_done_s')}}."
                )
    for t in data.get("hostile-jobs", {}).get("result", {}).get("tests", []):
        if t["outcome"] != "passed":
            out.append(f"Hostile jobs: `{t['test']}` {t['outcome'][:200]}.")
    return out


def findings(data: dict[str, dict[str, Any]]) -> list[str]:
    """The defects a run showed, in words: what, and how to see it again."""
    return [
        *_found_worker_exits(data),
        *_found_requests(data),
        *_found_postgres(data),
        *_found_tries_and_tests(data),
    ]


def _plot(data: dict[str, dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    bars: list[tuple[str, list[tuple[float, float, str]]]] = []
    colours = {"lease": "#c6dbef", "sweep": "#6baed6", "claim": "#2171b5", "work": "#bdbdbd", "resent": "#fd8d3c"}
    for i, t in enumerate(data.get("profile-kill", {}).get("result", {}).get("tries", []), 1):
        if t.get("kill_to_claimed_s") is None:
            continue
        lease = max(0.0, t.get("lease_left_at_kill_s") or 0.0)
        req = t.get("kill_to_requeued_s") or lease
        parts = [
            (0.0, lease, "lease"),
            (lease, max(0.0, req - lease), "sweep"),
            (req, max(0.0, t["kill_to_claimed_s"] - req), "claim"),
        ]
        if t.get("kill_to_done_s"):
            parts.append((t["kill_to_claimed_s"], t["kill_to_done_s"] - t["kill_to_claimed_s"], "work"))
        bars.append((f"profile worker, try {i}", parts))
    for i, t in enumerate(data.get("analysis-kill", {}).get("result", {}).get("tries", []), 1):
        if t.get("kill_to_done_s") is None:
            continue
        lease = max(0.0, t.get("lease_left_at_kill_s") or 0.0)
        resent = t.get("kill_to_resent_s") or lease
        parts = [
            (0.0, lease, "lease"),
            (lease, max(0.0, resent - lease), "sweep"),
            (resent, t["kill_to_done_s"] - resent, "resent"),
        ]
        bars.append((f"analysis worker, try {i}", parts))
    for key, c in data.get("redis", {}).get("result", {}).get("cases", {}).items():
        if c.get("kill_to_all_final_s"):
            bars.append(
                (
                    f"Redis {key.replace('kill_', 'kill, ').replace('_', ' ')}: all 8 final",
                    [(0.0, c["kill_to_all_final_s"], "work")],
                )
            )
    if not bars:
        return False
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(bars) + 1.6))
    labels = {
        "lease": "lease left at the kill",
        "sweep": "until the sweep acts",
        "claim": "until the other worker claims",
        "work": "profiling / jobs finishing",
        "resent": "analysis again until done",
    }
    seen: set[str] = set()
    for y, (_, parts) in enumerate(bars):
        for left, width, kind in parts:
            ax.barh(y, width, left=left, color=colours[kind], label=None if kind in seen else labels[kind])
            seen.add(kind)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(60, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("seconds after the kill (leases shortened: running 8 s, analyzing 10 s, sweep every 2 s)")
    ax.set_title("attnprof: takeover after SIGKILL, and Redis kills, on 2 CPU cores")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# The fields of a bad input's row the report's table shows: the summary keeps them for every input.
ROW_FIELDS = ("input", "group", "status", "error", "detail", "body", "sent_bytes", "expected", "words", "changed", "ok")


def _small(data: Any) -> Any:
    """The raw figures without logs, per-job lists, per-request rows or long texts (a command's output keeps its
    end): what the committed summary keeps."""
    if isinstance(data, dict):
        return {
            k: ("…" + v[-400:] if k == "output_tail" and isinstance(v, str) and len(v) > 400 else _small(v))
            for k, v in data.items()
            if k not in ("logs", "per_job", "rows")
        }
    if isinstance(data, list):
        return [_small(v) for v in data[:60]]
    if isinstance(data, str) and len(data) > 400:
        return data[:400] + "…"
    return data


def summary(data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The committed summary of a run's raw JSON: ``_small`` of each scenario, and the bad-inputs rows with the
    fields the report's table shows, so that the report can be written again from the summary alone."""
    found = {name: _small(d) for name, d in data.items()}
    rows = data.get("bad-inputs", {}).get("result", {}).get("rows")
    if rows is not None:
        found["bad-inputs"]["result"]["rows"] = [{k: _small(row[k]) for k in ROW_FIELDS if k in row} for row in rows]
    return found


def _head(data: dict[str, dict[str, Any]]) -> list[str]:
    """The report's title, how it was measured, on what, with what code, by which commands, and where the raw
    figures are."""
    day = min(d["date"] for d in data.values())[:10]
    v = next(iter(data.values())).get("versions", {})
    commits = sorted({json.dumps(d.get("code", {}), sort_keys=True) for d in data.values()})
    code = "; ".join(f"{c.get('commit', '?')[:12]} ({c.get('tree', '?')})" for c in map(json.loads, commits))
    hosts = [(n, d["host_before"], d["host_after"]) for n, d in data.items()]
    h0 = hosts[0][1]
    invoked = sorted({d.get("invoked_as", d["command"]) for d in data.values()})
    return [
        f"# Reliability and security of the stack: kills, outages, fuzzing, hostile inputs, tenants ({day})",
        "",
        "Each scenario starts the real stack as docs/service.md says (`attnprof serve`, `attnprof worker --analysis` "
        "with beat, CPU profile workers `attnprof worker --testbed rel-cpu --device cpu` with their bubblewrap "
        "jail), on loopback, with a Postgres cluster and a Redis server of its own (free ports, temporary folders, "
        "removed afterwards), then breaks something and counts what the database holds. Leases and the sweep are "
        "shortened so that a takeover takes seconds: "
        + ", ".join(f"`{k}={val}`" for k, val in SWEEP.items())
        + " (production: 10 s sweep, 60 s running lease, 120 s analyzing lease, 10 s heartbeat); each takeover is "
        "split into its parts, so the production figure follows.",
        "",
        f"**Host**: {h0['cpus']} cores ({h0['cpu_model']}), {h0['memory_gib']} GiB, {h0['platform']}; shared with "
        "other engineers' work: 1/5/15-minute load average per scenario, before → after: "
        + "; ".join(f"{n} {b['load']} → {a['load']}" for n, b, a in hosts)
        + ". Times include waiting for a core.",
        "",
        f"**Code**: commit {code}. **Versions**: "
        + ", ".join(f"{k} {val}" for k, val in v.items() if k != "platform")
        + ".",
        "",
        "Produced by (each scenario also runs alone: `python -m bench.reliability SCENARIO`, then "
        "`python -m bench.reliability report`):",
        "",
        "```bash",
        *invoked,
        "```",
        "",
        f"Raw figures: `out/reliability/*.json` (logs included, not committed); their summary without logs: "
        f"`bench/reports/data/reliability-{day}/summary.json`. Scenario wall times: "
        + ", ".join(f"{n} {d['wall_s']:.0f} s" for n, d in data.items())
        + f"; {sum(d['wall_s'] for d in data.values()) / 60:.1f} min in all.",
    ]


def render(data: dict[str, dict[str, Any]], plot: str | None) -> str:
    """The report's text: the head, the summary table, what was found, the plot (its file name, if drawn), and each
    scenario's section."""
    lines = [*_head(data), "", "## Summary", "", "| scenario | figure | the rule |", "|---|---|---|"]
    for title, figure, ok in summary_rows(data):
        lines.append(f"| {title} | {figure} | {verdict(ok)} |")
    lines += [
        "",
        "To compare a later run: the counts must stay as they are here (every job done once, no answer other than the "
        "503 JSON error during an outage, every hostile input and probe refused); the times follow the lease and "
        "sweep settings above and the load of the host.",
    ]
    found = findings(data)
    lines += ["", "## Found", ""]
    lines += [f"{i}. {text}" for i, text in enumerate(found, 1)] or ["Nothing: every rule held."]
    if plot:
        lines += ["", f"![takeover times]({plot})"]
    for name in SCENARIOS:
        if name not in data:
            continue
        d = data[name]
        lines += ["", f"## {TITLES[name]}", "", f"`{d['command']}` ({d['date']}, {d['wall_s']:.0f} s).", ""]
        if "error" in d["result"]:
            lines.append(f"The scenario broke: {d['result']['error']}")
            continue
        lines += SECTIONS[name](d["result"])
    return "\n".join(lines) + "\n"


def write_report(args: argparse.Namespace) -> None:
    """The report (``--report``), its plot beside it, and the summary under ``data/reliability-DAY/`` beside it,
    from ``--from`` (default: ``--out``)."""
    source = args.source or args.out
    data = load_results(source)
    if not data:
        raise SystemExit(f"no scenario results in {source}: run a scenario first")
    report = args.report
    report.parent.mkdir(parents=True, exist_ok=True)
    plot = report.with_suffix(".png")
    report.write_text(render(data, plot.name if _plot(data, plot) else None))
    folder = report.parent / "data" / f"reliability-{min(d['date'] for d in data.values())[:10]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary(data), indent=1, default=str) + "\n")
    say(f"report: {report}; summary: {folder / 'summary.json'}")
