"""What the report says of each scenario, from its JSON: its section, and its figure in the summary table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.reliability.common import SWEEP
from bench.reliability.figures import num, span, tally


def _section_profile_kill(r: dict[str, Any]) -> list[str]:
    lines = [
        "Two profile workers serve the testbed. Each try submits a job (the small CPU suite with 1 s of timing per "
        f"case), waits until the worker that claimed it has started the profiling subprocess, lets it run "
        f"{r['kill_after_s']} s, and sends SIGKILL to that worker alone. Then: the jailed subprocess must die with it, "
        "the lease on the row runs out (no heartbeat renews it), the sweep re-queues the job for attempt 2 with a "
        "new claim secret, the other worker claims and profiles it; the job must end `done` with exactly one run "
        "(attempt 2) and one comparison. The killed worker is started again before the next try.",
        "",
        "| try | lease left at the kill | kill → re-queued (sweep) | kill → claimed by the other worker | kill → done "
        "| subprocess gone after | runs (attempt) | comparisons | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, t in enumerate(r["tries"], 1):
        if "error" in t:
            lines.append(f"| {i} | – | – | – | – | – | – | – | broke: {t['error'][:120]} |")
            continue
        runs = ", ".join(f"1 ({x['attempt']})" for x in t["runs"]) if len(t["runs"]) == 1 else f"**{len(t['runs'])}**"
        lines.append(
            f"| {i} | {num(t['lease_left_at_kill_s'], 2)} s | {num(t['kill_to_requeued_s'], 2)} s "
            f"| **{num(t['kill_to_claimed_s'], 2)} s** | {num(t['kill_to_done_s'], 2)} s "
            f"| {num(t['kill_to_orphans_gone_s'], 2)} s | {runs} | {t['comparisons']} | {t['status']}, {t['verdict']} |"
        )
    lines += [
        "",
        "*Re-queued* is the time of the sweep's log line, written once its message is sent, hence a few "
        "milliseconds after the other worker's claim at times. The takeover is the lease left at the kill (at most "
        "`ATTNPROF_SWEEP__HEARTBEAT_STALE_S`, here "
        f"{SWEEP['ATTNPROF_SWEEP__HEARTBEAT_STALE_S']} s, renewed every heartbeat) plus up to one sweep interval "
        f"({SWEEP['ATTNPROF_SWEEP__INTERVAL_S']} s here) plus the claim. With the production settings (60 s lease, "
        "10 s heartbeat, 10 s sweep) the same parts give 50–70 s.",
    ]
    return lines


def _section_analysis_kill(r: dict[str, Any]) -> list[str]:
    lines = [
        "One profile worker; per try an analysis worker (with beat) that holds each analysis "
        f"`ATTNPROF_ANALYSIS__PAUSE_S={r['pause_s']}` s after making the comparison and before recording it "
        "(the test knob of `tests/worker/test_analysis_takeover.py`). A job is submitted and profiled; once its "
        "analysis is paused the worker gets SIGKILL, and a fresh analysis worker (no pause) is started at once, as a "
        "supervisor would. Its sweep must send `analysis.run` again when the lease runs out, whatever the broker's "
        "`unacked` hash holds; the job must be done within a minute with one comparison. Then the dead worker's "
        "delivery is put back on the queue (as kombu restores it after `visibility_timeout`): it must change nothing.",
        "",
        "| try | lease left at the kill | kill → fresh worker ready | kill → analysis sent again | kill → done "
        "| comparisons | after the restored delivery | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, t in enumerate(r["tries"], 1):
        if "error" in t:
            lines.append(f"| {i} | – | – | – | – | – | – | broke: {t['error'][:120]} |")
            continue
        after = t["after_restore"]
        lines.append(
            f"| {i} | {num(t.get('lease_left_at_kill_s'), 2)} s | {num(t['kill_to_fresh_ready_s'], 2)} s "
            f"| {num(t['kill_to_resent_s'], 2)} s | **{num(t['kill_to_done_s'], 2)} s** | {t['comparisons']} "
            f"| {t['restored_deliveries']} delivery ran: {after['comparisons']} comparison, "
            f"{'finished_at unchanged' if after['finished_at_unchanged'] else 'finished_at CHANGED'} "
            f"| {t['status']}, {t['verdict']} |"
        )
    lines += [
        "",
        f"Here the analyzing lease is {SWEEP['ATTNPROF_SWEEP__ANALYZING_STALE_S']} s (renewed every third of it while "
        "the analysis works); in production it is 120 s, so the same kill is answered after up to about 130 s.",
    ]
    return lines


def _section_redis(r: dict[str, Any]) -> list[str]:
    lines = [
        "Two profile workers, the analysis worker with beat, and a Redis server of this benchmark's own "
        '(a password, `--save ""`; with or without `--appendonly yes --appendfsync everysec`). The figure: every '
        "job ends `done`, with one run and one comparison (none lost, none stored twice). Where a process of the "
        "stack exits by itself, the benchmark starts it again, as the deployment's `restart: unless-stopped` does, "
        "and the exit is listed. *Messages waiting* are the `profile.run` messages on the testbed's queue: the "
        "dispatcher keeps the other queued jobs in the database and offers one per free live worker (at least one).",
        "",
        "| case | jobs | at the kill | messages waiting → after the restart | done | stored twice | profile / analysis "
        "messages sent again by the sweep | all final after Redis was back | worker exits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, c in r["cases"].items():
        if "error" in c:
            lines.append(f"| {key} | – | – | – | – | – | – | – | broke: {c['error'][:150]} |")
            continue
        at = ", ".join(f"{v} {k}" for k, v in (c.get("at_kill") or {}).items()) or "–"
        waiting = (
            f"{c['messages_waiting_at_kill']} → {c['messages_after_restart']}"
            if "messages_waiting_at_kill" in c
            else "–"
        )
        if "submissions_while_down" in c:
            answers = [a["status"] for a in c["submissions_while_down"]]
            each = span([a["seconds"] for a in c["submissions_while_down"]], 2)
            at = f"{len(answers)} submitted while down ({answers.count(202)} accepted, {each} s each)"
        exits = (
            "; ".join(
                f"{x['process']} (exit {x['exit_code']}: `{x['last_error'].split('] ', 1)[-1][:110]}`)"
                for x in c.get("restarts", [])
            )
            or "none"
        )
        lines.append(
            f"| {key.replace('_', ' ')} | {c['jobs']} | {at} | {waiting} | {c['done']} | {len(c['stored_twice'])} "
            f"| {c['profile_resent']} / {c['analysis_resent']} | {num(c.get('back_to_all_final_s'))} s | {exits} |"
        )
    mid = r["cases"].get("kill_mid_analysis")
    if mid and "error" not in mid:
        lines += [
            "",
            "*kill mid analysis*: the analysis worker holds an analysis (paused 8 s) when Redis is killed; Redis is "
            "back "
            f"3 s later. Worker alive while Redis was down: {mid['alive_while_down']}; it exited afterwards: "
            f"{mid['worker_exited']} (exit code {mid['exit_code']}); its log: "
            f"`{(mid['unrecoverable_error'] or 'nothing')[:160]}`.",
        ]
    down = r["cases"].get("down_30s_during_submissions")
    if down and "readyz_while_down" in down and down["readyz_while_down"]:
        lines += [
            "",
            f"`/readyz` while Redis was down: {down['readyz_while_down'][0]['status']} "
            f"`{down['readyz_while_down'][0]['body'][:160]}`.",
        ]
    return lines


_STATES = {"queued, waiting": "waiting in the database", "queued, offered": "offered (its message sent)"}


def _section_postgres(r: dict[str, Any]) -> list[str]:
    st = r["storm"]
    out = st["outage"]
    lines = [
        f"A Postgres cluster of this benchmark's own (`initdb`, its own port, as in `tests/pgcluster.py`). "
        f"{st['submissions']} job submissions from {st['threads']} threads (each pausing 0.25 s between its own, to "
        f"a testbed with no worker, each with its own commit and `Idempotency-Key`, never retried); once "
        f"{st['submissions'] // 4} were answered the cluster was stopped (`pg_ctl stop -m fast`) and started "
        f"{num(st['down_s'])} s later (stop at {num(out.get('stop'))} s, started at {num(out.get('started'))} s of the "
        "storm).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| answers | {', '.join(f'{v} {k}' for k, v in st['answers_by_kind'].items())} |",
        f"| answers sent during the outage | {tally(st['answers_during_outage_by_kind'])} |",
        f"| plain-text 500 | {len(st['plain_text_500'])} |",
        f"| refusals other than the 503 JSON error | {len(st['not_503_json_refusals'])} |",
        f"| accepted (202) but not stored | **{len(st['accepted_lost'])}** |",
        f"| refused but stored | **{len(st['refused_but_stored'])}** |",
        f"| stored twice | {len(st['stored_twice'])} |",
        "| accepted jobs afterwards (the testbed has no worker: the dispatcher offers it one job at a time) "
        f"| {tally({_STATES.get(k, k): v for k, v in st.get('accepted_by_state', {}).items()})} |",
        "| accepted but stranded (not queued, or offered with no message once the sweep had its turn) "
        f"| {len(st['accepted_stranded'])} |",
        f"| each refused one sent again with its key | {tally(st['retries_of_refused_by_status'], ' × ')}; "
        f"rows per commit afterwards: {st['rows_per_commit_after_retries']} |",
        f"| slowest answer | {num(st['slowest_answer_s'], 3)} s |",
        f"| tracebacks in the server's log | {r['server_tracebacks']} |",
        "",
        "`attnprof submit --wait` (the small suite, a real profile worker) with the database stopped for "
        f"{num(st['down_s'])} s: before the command starts (its POST meets the outage), and once the job runs (its "
        "polls meet it). It must end with a verdict (exit 0 or 1), never 2 (bad input) or 3 (no verdict):",
        "",
        "| Postgres stopped at | exit code | seconds | jobs stored | job | last line |",
        "|---|---|---|---|---|---|",
    ]
    for w in r["submit_wait"]:
        last = [ln for ln in w["output_tail"].strip().splitlines() if ln.strip()][-1:] or [""]
        lines.append(
            f"| its {w['when']} | **{w['exit_code']}** | {num(w['seconds'])} | {w['jobs_stored']} "
            f"| {', '.join(w['job_status'])} | `{last[0][:100]}` |"
        )
    return lines


def _section_schemathesis(r: dict[str, Any]) -> list[str]:
    lines = [
        "Schemathesis reads each document from the running server and generates requests per operation "
        f"(derandomized, {r['examples_per_operation']} positive/negative cases an operation at most, no shrinking), "
        "sent over HTTP. Public API: the admin token of a project that holds an uploaded run, its comparison and a "
        "queued job (positive cases name them). Worker routes: the worker token for `/internal/testbed` and the claim "
        "(positive cases carry a fresh job's claim secret); for the job routes, a fresh job is claimed and its job "
        "token used, as `tests/server/test_schemathesis.py` does in process. Every answer is checked with "
        "Schemathesis' default checks (server error, status code, content type and body against the document, "
        f"schema-valid data refused beyond the statuses the schema cannot rule out). Budget {r['budget_s']:.0f} s.",
        "",
        "| document | operations | cases | server errors (5xx) | other check failures | transport errors | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, doc in (("public", "/openapi.json"), ("internal", "/internal/openapi.json")):
        x = r[key]
        lines.append(
            f"| `{doc}` | {len(x['operations'])} | {x['cases']} | **{x['server_errors']}** | {x['check_failures']} "
            f"| {x['transport_errors']} | {num(x['seconds'])} |"
        )
    notes = []
    for key in ("public", "internal"):
        for name, op in r[key]["operations"].items():
            fails = {k: v for k, v in op["failures"].items() if not k.startswith("generation")}
            if fails:
                notes.append(f"- {name}: {fails}")
    for key in ("public", "internal"):
        for ex in r[key].get("server_error_examples", []):
            notes.append(f"- 5xx: {ex['operation']} → {ex['status']} `{ex['body'][:160]}`")
    if notes:
        lines += ["", "Failures:", "", *notes]
    skipped = [name for key in ("public", "internal") for name, op in r[key]["operations"].items() if op["cases"] == 0]
    if skipped:
        lines += [
            "",
            f"Operations with no case sent: {', '.join(f'`{n}`' for n in skipped)} "
            "(Schemathesis cannot serialise the gzip bodies these take).",
        ]
    return lines


def _section_bad_inputs(r: dict[str, Any]) -> list[str]:
    lines = [
        "Each input is sent to the running server with a token allowed to make the request; the rows of every table "
        "an input could add to (projects, testbeds, jobs, runs, cases, traces, comparisons, alerts, artifacts, "
        "tokens, baseline rules) and the queue's length are counted before and after. An input passes when it gets "
        "a 4xx whose `detail` names the field (one of the words listed) and nothing changed. The 200 MB bodies are "
        "sent 1 MiB at a time over a raw socket that stops as soon as an answer arrives: *sent* is how much went out "
        "before the refusal.",
        "",
        "| input | answer | detail | changed |",
        "|---|---|---|---|",
    ]
    for row in r["rows"]:
        mark = "" if row["ok"] else " **✗**"
        sent = f" (after {row['sent_bytes'] / 1e6:.0f} MB sent)" if row.get("sent_bytes") else ""
        detail = (row["detail"] or row.get("body", ""))[:150].replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {row['input']}{mark} | {row['status']} {row['error'] or ''}{sent} | {detail} "
            f"| {row['changed'] or 'nothing'} |"
        )
    lines += [
        "",
        f"{r['refused_clearly']} of {r['inputs']} pass. Refused without naming the field: "
        f"{', '.join(r['refused_unclear']) or 'none'}. Not refused: {', '.join(r['not_refused']) or 'none'}. "
        f"Changed something: {', '.join(r['changed_something']) or 'none'}. Tracebacks in the server's log: "
        f"{r['server_tracebacks']}.",
    ]
    return lines


def _section_isolation(r: dict[str, Any]) -> list[str]:
    kinds = {
        "cross-project": "project a's admin, submit and read tokens on project b's routes and b's jobs by id",
        "cross-reference": "a's tokens on a's own routes naming b's run, comparison or token",
        "role": "a read token on write routes, a submit token on admin routes, project tokens on the worker claim",
        "worker": "a worker token on project routes; on b's job without the claim secret, with a wrong one, "
        "from another testbed with the right one, and on the job routes without a claim",
        "job-token": "a's job token (a claimed job of a's) on b's job routes and on project routes",
        "no-token": "no Authorization header",
    }
    lines = [
        "Two projects, a and b, each with a token of each role; b holds an uploaded run with its comparison and a "
        "trace, a pin, a queued job. Each probe must be refused (401, 403 or 404; a worker request to a job may also "
        "be 409 or 422) and, where it names one of b's objects, answered exactly as the same request naming an "
        "object that does not exist (a project that is not there, a random id), so that nothing tells an intruder "
        "what exists.",
        "",
        "| probes | what | refused as they must be |",
        "|---|---|---|",
    ]
    for kind, counts in r["by_kind"].items():
        lines.append(f"| {counts['probes']} | {kinds.get(kind, kind)} | {counts['ok']} of {counts['probes']} |")
    lines += [
        "",
        f"Answers: {', '.join(f'{v} × {k}' for k, v in sorted(r['statuses'].items()))}. Project b after the probes: "
        f"{'unchanged' if r['b_unchanged'] else 'CHANGED'} ({r['b_after']}); b's tokens all still work: "
        f"{r['b_tokens_still_work']}; a's claimed job still `{r['a_claimed_job_state_after']}`.",
    ]
    if r["not_ok"]:
        lines += ["", "Not refused as they must be:", ""]
        lines += [f"- {x['probe']}: {x['status']} {x.get('detail', '')[:160]}" for x in r["not_ok"]]
    return lines


def _section_hostile(r: dict[str, Any]) -> list[str]:
    lines = [
        f"`{r['command']}`, against this scenario's own Postgres cluster and Redis (`ATTNPROF_TEST_PG`, "
        f"`ATTNPROF_TEST_WORKER_REDIS`): exit {r['exit_code']} in {num(r['seconds'])} s.",
        "",
        "| test | outcome | seconds |",
        "|---|---|---|",
    ]
    for t in r["tests"]:
        lines.append(f"| `{t['test'].split('.')[-1]}` | {t['outcome']} | {num(t['seconds'])} |")
    return lines


# --- the summary table's figure of each scenario, and whether its rule held ------------------------------------


def _figure_profile_kill(r: dict[str, Any]) -> tuple[str, bool]:
    t = r["tries"]
    good = [x for x in t if x.get("ok")]
    return (
        f"{len(good)} of {len(t)} kills: one run per job (by the second attempt), one "
        "comparison; takeover (kill → claimed by the other worker) "
        f"{span([x.get('kill_to_claimed_s') for x in t])} s",
        len(good) == len(t),
    )


def _figure_analysis_kill(r: dict[str, Any]) -> tuple[str, bool]:
    t = r["tries"]
    good = [x for x in t if x.get("ok")]
    return (
        f"{len(good)} of {len(t)} kills: done {span([x.get('kill_to_done_s') for x in t])} s "
        "after the kill, one comparison (also after the dead worker's delivery ran again)",
        len(good) == len(t),
    )


def _figure_redis(r: dict[str, Any]) -> tuple[str, bool]:
    parts, ok = [], True
    for key, c in r["cases"].items():
        if "error" in c:
            parts.append(f"{key}: broke ({c['error'][:80]})")
            ok = False
            continue
        parts.append(
            f"{key.replace('_', ' ')}: {c['done']}/{c['jobs']} done, {len(c['stored_twice'])} stored twice"
            + (f", {len(c['restarts'])} worker exit(s)" if c.get("restarts") else "")
        )
        ok = ok and bool(c["ok"]) and not c.get("restarts")
    return "; ".join(parts), ok


def _figure_postgres(r: dict[str, Any]) -> tuple[str, bool]:
    st = r["storm"]
    waits = ", ".join(f"at its {w['when']}: exit {w['exit_code']}" for w in r["submit_wait"])
    return (
        f"{st['submissions']} submissions: {st['accepted']} accepted, {st['refused']} refused "
        f"({', '.join(f'{v} {k}' for k, v in st['answers_by_kind'].items() if k != 'accepted')}); "
        f"accepted lost {len(st['accepted_lost'])}, refused but stored {len(st['refused_but_stored'])}; "
        f"`submit --wait` {waits}",
        bool(st["ok"]) and all(w["ok"] for w in r["submit_wait"]),
    )


def _figure_schemathesis(r: dict[str, Any]) -> tuple[str, bool]:
    pub, internal = r["public"], r["internal"]
    return (
        f"{pub['cases']} cases on /openapi.json, {internal['cases']} on /internal/openapi.json; "
        f"server errors {pub['server_errors'] + internal['server_errors']}; other check failures "
        f"{pub['check_failures'] + internal['check_failures']}",
        bool(r["ok"]),
    )


def _figure_bad_inputs(r: dict[str, Any]) -> tuple[str, bool]:
    return (
        f"{r['refused_clearly']} of {r['inputs']} refused with a 4xx naming the field and "
        f"nothing stored; {r['refused']} of {r['inputs']} refused; {len(r['changed_something'])} changed "
        "something",
        bool(r["ok"]),
    )


def _figure_isolation(r: dict[str, Any]) -> tuple[str, bool]:
    return (
        f"{r['refused_as_designed']} of {r['probes']} requests refused (and answered as for an "
        f"object that does not exist, where one was named); project b "
        f"{'unchanged' if r['b_unchanged'] else 'CHANGED'}",
        bool(r["ok"]),
    )


def _figure_hostile(r: dict[str, Any]) -> tuple[str, bool]:
    return f"{r['passed']} of {r['total']} tests passed ({r['summary']})", bool(r["ok"])


FIGURES: dict[str, Callable[[dict[str, Any]], tuple[str, bool]]] = {
    "profile-kill": _figure_profile_kill,
    "analysis-kill": _figure_analysis_kill,
    "redis": _figure_redis,
    "postgres": _figure_postgres,
    "schemathesis": _figure_schemathesis,
    "bad-inputs": _figure_bad_inputs,
    "isolation": _figure_isolation,
    "hostile-jobs": _figure_hostile,
}

SECTIONS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "profile-kill": _section_profile_kill,
    "analysis-kill": _section_analysis_kill,
    "redis": _section_redis,
    "postgres": _section_postgres,
    "schemathesis": _section_schemathesis,
    "bad-inputs": _section_bad_inputs,
    "isolation": _section_isolation,
    "hostile-jobs": _section_hostile,
}
