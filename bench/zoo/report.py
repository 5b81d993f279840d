"""The zoo's report: per GPU and per change, the effect measured apart against what ``attnprof ab`` and a paired job
said, false alarms on identical trees, the cost, and the targets met or not.

    python -m bench.zoo.report DIR [DIR ...] --out bench/reports/verdict-zoo.md
    python -m bench.zoo.report --out bench/reports/verdict-zoo.md        # no runs yet: the page's skeleton

Each DIR is a folder ``truth.py`` and ``run.py`` wrote (truth.json, run.json); folders of the same GPU (by the name
their own documents give it) are read together.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.zoo import records, scoring
from bench.zoo.changes import CHANGES
from bench.zoo.records import CaseLine, Outcome, RunDoc, TruthCase, TruthDoc
from bench.zoo.scoring import (
    BINS,
    Machine,
    Tally,
    caught,
    caught_target,
    cost_ratios,
    false_target,
    gather,
    judge_caught,
    judge_cost,
    judge_false,
    outcomes_of,
)


def pct(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x * 100:+.{digits}f}%"


def seconds(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def cell(text: object) -> str:
    """A markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def paired_line(line: CaseLine | None) -> str:
    if line is None:
        return "no latency finding"
    ci = f" [{pct(line.ci_low)}, {pct(line.ci_high)}]" if line.ci_low is not None else ""
    aside = f", {line.set_aside} set aside" if line.set_aside else ""
    limit = f" ({line.limit})" if line.limit else ""
    return f"{line.status} {pct(line.change)}{ci}, {line.stopped_by}{limit} after {line.pairs} pairs{aside}"


def targets_section(machines: list[Machine]) -> list[str]:
    out = [
        "## Targets",
        "",
        "At the defaults (suites without a timing table, no `--max-pairs`). *Caught*: the verdict is `fail` for a "
        "change whose ground truth is 1% slower or more (interval above zero). *False alarm*: `fail` on identical "
        "trees. *Cost*: the `ab` process's wall time against one unpaired `profile` process of the head; the "
        "worker's GPU time for the paired job (claimed to its run stored) against the same for the head alone as an "
        "unpaired job (where that ran; else against the `profile` process); median over changes.",
        "",
        "| target | GPU | through `attnprof ab` | through a paired job |",
        "|---|---|---|---|",
    ]
    if not machines:
        for target in ("1% change caught ≥ 95%", "identical trees fail ≤ 1%", "paired ≤ 1.5× one unpaired profile"):
            out.append(f"| {target} | — | not measured yet | not measured yet |")
    for m in machines:
        c, f, r = caught_target(m), false_target(m), cost_ratios(m)
        out.append(
            f"| 1% change caught ≥ 95% | {cell(m.name)} | {c['ab'].show()}: {judge_caught(c['ab'])} | "
            f"{c['job'].show()}: {judge_caught(c['job'])} |"
        )
        out.append(
            f"| identical trees fail ≤ 1% | {cell(m.name)} | {f['ab'].show()}: {judge_false(f['ab'])} | "
            f"{f['job'].show()}: {judge_false(f['job'])} |"
        )
        out.append(
            f"| paired ≤ 1.5× one unpaired profile | {cell(m.name)} | {judge_cost(r['ab'])} | {judge_cost(r['job'])} |"
        )
    for m in machines:
        out += cost_note(m)
    return [*out, ""]


def cost_note(m: Machine) -> list[str]:
    """Why a paired job's cost reads above `ab`'s: the worker's own part of a job, from the runs of each change that
    ran both ways, and which yardstick the ratio had."""
    extra = []
    for c in CHANGES:
        abs_ = [r.process_s for r in m.ab(c.name) if r.outcome is not None]
        held = [j.held_s for j in m.jobs(c.name) if j.held_s is not None]
        if abs_ and held:
            extra.append(statistics.median(held) - statistics.median(abs_))
    if not extra:
        return []
    alone = [c.name for c in CHANGES if scoring.unpaired_held(m, c.name) is not None]
    yardstick = (
        f"an unpaired job of the head ({len(alone)} change(s)), which carries the same part"
        if alone
        else "the `profile` process, which has none of it: no unpaired job of the head ran in this folder (the run's "
        "`job` step runs one for the first `--profiles` changes where its budget allows)"
    )
    return [
        "",
        f"Why a job reads above `ab` on {m.name}: a paired job held the GPU a median {statistics.median(extra):.1f} s "
        f"(range {min(extra):.1f} to {max(extra):.1f} s, {len(extra)} changes) longer than the `ab` process on the "
        "same change: the worker's part of a job (claiming it, both trees' bundles fetched and unpacked, the jail "
        f"started, the documents read back and stored). The job's ratio had {yardstick}.",
    ]


def changes_section() -> list[str]:
    out = [
        "## The changes",
        "",
        "Each a pull request against the project in `bench/zoo/project/` (a package `zooattn` with custom targets, and "
        "its suites in `perf/`), written as hunks in `bench/zoo/changes.py`; each run folder holds its diff "
        "(`<change>/change.diff`).",
        "",
        "| change | pull request | suite | expected |",
        "|---|---|---|---|",
    ]
    for c in CHANGES:
        kind = " (identical trees)" if c.identical else ""
        out.append(f"| `{c.name}`{kind} | {cell(c.title)} | `{c.suite}` | {cell(c.expected)} |")
    return [*out, ""]


def provenance_lines(m: Machine) -> list[str]:
    head = "| folder | what | date (UTC) | command | driver | CUDA | cuDNN | torch | Triton | sources |"
    out = [head, "|---" * 10 + "|"]
    docs: list[tuple[str, TruthDoc | RunDoc]] = [*m.truth_docs, *m.run_docs]
    for folder, doc in docs:
        p = doc.provenance
        kind = "truth" if isinstance(doc, TruthDoc) else f"run ({', '.join(doc.steps)}, x{doc.repeat})"
        out.append(
            f"| {cell(folder)} | {kind} | {p.date} | `{cell(p.command)}` | {p.driver or '—'} | {p.cuda or '—'} | "
            f"{p.cudnn or '—'} | {p.torch or '—'} | {p.triton or '—'} | {p.source_digest} |"
        )
    stops = [f"{folder}: {d.stopped}" for folder, d in docs if d.stopped]
    stops += [f"{folder}: not reached: {', '.join(d.not_run)}" for folder, d in docs if d.not_run]
    stops += [f"{folder}: {note}" for folder, d in docs if isinstance(d, RunDoc) for note in d.notes]
    return out + [""] + (["Stops and notes:", "", *(f"- {cell(s)}" for s in stops), ""] if stops else [])


def truth_cell(c: TruthCase | None) -> str:
    if c is None:
        return "not measured"
    if c.effect is None:
        return f"failed: {cell((c.error or '')[:200])}"
    return f"{pct(c.effect)} [{pct(c.ci_low)}, {pct(c.ci_high)}] ({c.base_us or 0:,.1f} → {c.head_us or 0:,.1f} µs)"


def verdicts(outs: list[Outcome | None], case: str | None) -> str:
    shown = []
    for o in outs:
        if o is None:
            shown.append("no verdict")
        else:
            line = o.case(case) if case else None
            others = "; ".join(f"{x.metric} {x.status}" for x in o.others if x.case == case)
            shown.append(f"**{o.verdict}**: {paired_line(line)}" + (f"; {others}" if others else ""))
    return "<br>".join(cell(s) for s in shown) or "not run"


def machine_section(m: Machine) -> list[str]:
    out = [f"## {m.name}", "", *provenance_lines(m), "### Per change", ""]
    out += [
        "| change | case | ground truth: effect [95%] (base → head) | `attnprof ab` | paired job | caught (ab; job) |",
        "|---|---|---|---|---|---|",
    ]
    for c in CHANGES:
        measured = m.truths.get(c.name)
        outs = outcomes_of(m, c.name)
        seen = [line.case for o in [*outs["ab"], *outs["job"]] if o is not None for line in o.cases]
        cases = [x.case for x in measured.cases] if measured else list(dict.fromkeys(seen))
        if not cases and c.name not in m.runs:
            continue
        t = m.truth(c.name)
        hits = "; ".join(", ".join(caught(o, t, c.identical) for o in outs[path]) or "—" for path in ("ab", "job"))
        for j, case in enumerate(cases or ["—"]):
            one = next((x for x in measured.cases if x.case == case), None) if measured else None
            out.append(
                f"| {f'`{c.name}`' if j == 0 else ''} | {cell(case)} | {truth_cell(one)} | "
                f"{verdicts(outs['ab'], case)} | {verdicts(outs['job'], case)} | {hits if j == 0 else ''} |"
            )
    out += ["", "### By effect size", "", "| ground truth | changes | `ab` caught | job caught |", "|---|---|---|---|"]
    for low, high in BINS:
        tallies = {"ab": Tally(), "job": Tally()}
        names = []
        for c in CHANGES:
            t = m.truth(c.name)
            if c.identical or t is None or t.kind != "slower" or not low <= t.effect < high:
                continue
            names.append(c.name)
            for path, outs_ in outcomes_of(m, c.name).items():
                for o in outs_:
                    if o is not None:
                        tallies[path].add(o.verdict == "fail")
        label = f"{low:.1%} to {high:.1%} slower" if high < math.inf else f"{low:.0%} or more slower"
        out.append(f"| {label} | {', '.join(names) or '—'} | {tallies['ab'].show()} | {tallies['job'].show()} |")
    out += ["", "### Identical trees", ""]
    out += ["| change | path | runs | fail | warn | pass | kernel lines in findings |", "|---|---|---|---|---|---|---|"]
    for c in CHANGES:
        if not c.identical:
            continue
        for path, outs_ in outcomes_of(m, c.name).items():
            given = [o for o in outs_ if o is not None]
            if not given:
                continue
            kernels = sum(len(line.kernel_lines) for o in given for line in o.cases)
            counts = [sum(o.verdict == v for o in given) for v in ("fail", "warn", "pass")]
            out.append(f"| `{c.name}` | {path} | {len(given)} | {counts[0]} | {counts[1]} | {counts[2]} | {kernels} |")
    out += ["", "### Cost", ""]
    out += [
        "| change | profile (s) | `ab` (s) | ab / profile | unpaired job GPU held (s) | job GPU held (s) "
        "| job / unpaired |"
    ]
    out += ["|---|---|---|---|---|---|---|"]
    for c in CHANGES:
        runs = m.runs.get(c.name, [])
        prof = [r.profile.process_s for r in runs if r.profile]
        abs_ = [r.process_s for r in m.ab(c.name)]
        held = [j.held_s for j in m.jobs(c.name) if j.held_s is not None]
        if not (prof or abs_ or held):
            continue
        p = statistics.median(prof) if prof else None
        a = statistics.median(abs_) if abs_ else None
        h = statistics.median(held) if held else None
        alone = scoring.unpaired_held(m, c.name)
        yardstick = alone or p
        ratio = f"{a / p:.2f}x" if a and p else "—"
        jratio = "—"
        if h and yardstick:
            jratio = f"{h / yardstick:.2f}x" + ("" if alone else " (of the profile)")
        cells = [seconds(p), seconds(a), ratio, seconds(alone), seconds(h), jratio]
        out.append(f"| `{c.name}` | " + " | ".join(cells) + " |")
    out += ["", *misses(m), "", *rejudged(m), ""]
    return out


def misses(m: Machine) -> list[str]:
    """Every comparison that did not give the answer owed, with what it said about itself."""
    out = ["### What missed", ""]
    for c in CHANGES:
        t = m.truth(c.name)
        for path, outs in outcomes_of(m, c.name).items():
            for i, o in enumerate(outs):
                verdict = caught(o, t, c.identical)
                if verdict not in ("no", "false alarm", "no verdict"):
                    continue
                said = "" if o is None else "; ".join([*(o.suspect or []), *o.notes][:3])
                line = paired_line(o.case(t.case)) if o is not None and t is not None else ""
                out.append(f"- `{c.name}` {path} #{i + 1}: {verdict} ({o.verdict if o else '—'}; {line}). {said}")
    return out if len(out) > 2 else [*out, "Nothing missed."]


def rejudged(m: Machine) -> list[str]:
    """The ``ab`` runs whose saved documents today's rules judge otherwise than the run did."""
    out = ["### Judged again with the current rules", ""]
    if not m.rejudged:
        return [*out, "Each `ab` run's saved documents, judged again by today's `compare_paired`: all verdicts stand."]
    out.append(
        "Each `ab` run's saved documents (base, head, paired), judged again by today's `compare_paired`: the same "
        "measurement, the current rules. Where the verdict moved:"
    )
    out.append("")
    for (change, _), (then, now) in m.rejudged.items():
        why = "; ".join(n for n in now.notes if "clock" in n.lower() or "suspect" in n.lower())[:300]
        out.append(f"- `{change}`: {then.verdict} as run, **{now.verdict}** now. {why}")
    return out


def render(machines: list[Machine]) -> str:
    out = [
        "# Verdicts on the regression zoo",
        "",
        f"{len(CHANGES)} changes to a small attention library ({sum(not c.identical for c in CHANGES)} that change "
        f"the work, {sum(c.identical for c in CHANGES)} whose trees do the same work), each run as a pull request "
        "is: through `attnprof ab` (the merge base and the head interleaved on one GPU) and as a paired job through "
        "the service (the embedded stack: SQLite, the folder broker, `attnprof serve`, the analysis worker, one "
        "profile worker in its jail), at the defaults. Each change's effect is measured apart first, as its ground "
        "truth: both trees in one process, interleaved blocks of CUDA-event timing with the profiler's hold and "
        "read flush, the median of 30 blocks' ratios with a bootstrap interval (`bench/zoo/truth.py`).",
        "",
        "Produced by, on each GPU host (through the device tool, `.whl` and `.bwrap` carried; `bench/zoo/gpu.sh` "
        "says what it needs), then here:",
        "",
        "```sh",
        "bash bench/zoo/gpu.sh        # truth, then the zoo through ab, jobs and profiles: $OUT/zoo-<gpu>",
        "python -m bench.zoo.report bench/reports/data/verdict-zoo/<gpu> [...] --out bench/reports/verdict-zoo.md",
        "```",
        "",
        *targets_section(machines),
        *changes_section(),
    ]
    if not machines:
        out += ["No GPU runs yet.", ""]
    for m in machines:
        out += machine_section(m)
    out += ["## Data", "", *(f"- `{f}`" for m in machines for f in m.folders)]
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("folders", nargs="*", type=Path, help="folders truth.py and run.py wrote")
    p.add_argument("--out", type=Path, required=True, help="the markdown page to write")
    a = p.parse_args(argv)
    missing = [f for f in a.folders if not (f / records.TRUTH_FILE).is_file() and not (f / records.RUN_FILE).is_file()]
    if missing:
        p.error(f"no truth.json or run.json in {', '.join(map(str, missing))}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(render(gather(a.folders)))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
