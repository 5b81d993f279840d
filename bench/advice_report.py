"""The report of ``bench/advice_gpu.sh``: why SDPA refused a backend (the profiler against PyTorch), the counter
cache's coverage and cost, the model's class against ncu's, and each piece of advice against the same change applied
by hand.

    python -m bench.advice_report bench/reports/data/advice/<gpu> [...] --out bench/reports/advice.md
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from attnprof.core.counter_cache import coverage
from attnprof.core.counter_cache import heavy as heavy_kernels
from attnprof.core.documents import Case, ResultDocument, load_result
from attnprof.core.measure.counters import MIN_SHARE

# each user call of bench/advice/suite.toml, the case with the advice applied by hand, and the rule that advises it
PAIRS = (
    ("mask", "mask-fixed", "mask", "is_causal=True"),
    ("padding", "padding-fixed", "mask", "drop the mask"),
    ("views", "views-fixed", "contiguous", "contiguous"),
    ("hd80", "hd80-fixed", "head_dim", "pad the head dimension"),
    ("math", "math-fixed", "backend", ""),
    ("gqa", "gqa-fixed", "gqa", "enable_gqa"),
)


@dataclass
class Folder:
    path: Path
    gpu: str
    when: str

    @classmethod
    def read(cls, path: Path) -> Folder:
        lines = (path / "host.txt").read_text().splitlines()
        gpu = next((line.removeprefix("gpu: ") for line in lines if line.startswith("gpu: ")), path.name)
        return cls(path, gpu, lines[1] if len(lines) > 1 else "")


def _median(case: Case | None) -> float | None:
    return case.latency_us.median if case is not None and case.latency_us is not None else None


def sdpa_section(folder: Folder) -> list[str]:
    path = folder.path / "sdpa" / "sdpa-reasons.json"
    if not path.is_file():
        return ["(no recording)"]
    data = json.loads(path.read_text())
    out = [
        f"PyTorch {data['versions'].get('torch')}, {data['gpu']}. Each call run once under the profiler; *profiler*: "
        "the backends the profiler's rebuilt call was told it could take; *PyTorch*: `can_use_*_attention` on the real "
        "tensors.",
        "",
        "| call | ran | profiler: eligible | PyTorch: eligible | agree | a reason PyTorch gave |",
        "|---|---|---|---|---|---|",
    ]
    agree = total = 0
    for row in data["calls"]:
        if "error" in row:
            out.append(f"| {row['name']} | error: {row['error'][:80]} | | | | |")
            continue
        profiler = row["profiler"][0] if row["profiler"] else {}
        eligible = [b for b in profiler.get("eligible") or [] if b != "math"]
        direct = [b for b, reasons in row["direct"].items() if reasons is None]
        same = sorted(eligible) == sorted(direct)
        agree += same
        total += 1
        reason = next((r[0] for r in row["direct"].values() if r), "")
        out.append(
            f"| {row['name']} | {row['backend_ran']} | {', '.join(eligible) or '—'} | {', '.join(direct) or '—'} | "
            f"{'yes' if same else '**no**'} | {reason[:110]} |"
        )
    return [f"The profiler agreed with PyTorch on {agree} of {total} calls.", "", *out]


def _walls(folder: Folder) -> dict[str, float]:
    walls = {}
    for line in (folder.path / "counters" / "walls.txt").read_text().splitlines():
        name, seconds, _rc = line.split()
        walls[name] = float(seconds)
    return walls


def counters_section(folder: Folder) -> list[str]:
    walls = _walls(folder)
    docs: dict[str, ResultDocument] = {}
    for name in ("none", "cached-first", "cached-again"):
        for path in (folder.path / "counters" / f"{name}.json", folder.path / "counters" / f"{name}.json.gz"):
            if path.is_file():  # as the run wrote it, or gzip'd where it is kept
                docs[name] = load_result(path)
    if "none" not in walls or "cached-again" not in docs:
        return ["(incomplete: " + ", ".join(sorted(docs)) + ")"]
    base = walls["none"]
    out = ["| run | wall (s) | against `--counters none` | heavy kernels with ncu's class |", "|---|---|---|---|"]
    for name, doc in docs.items():
        with_class, heavy = coverage(doc.cases, MIN_SHARE)
        share = f"{with_class} of {heavy}" if name != "none" else "—"
        out.append(f"| `{name}` | {walls[name]:.1f} | {walls[name] / base:.2f}× | {share} |")
    first = docs.get("cached-first")
    if first is not None:
        kernels = [k for c in first.cases for k in heavy_kernels(c, MIN_SHARE)]
        judged = [k for k in kernels if k.counter_bound and k.bound]
        match = sum(1 for k in judged if k.bound == k.counter_bound)
        out += [
            "",
            f"The model's class (no counters) against ncu's, on the same kernels: {match} of {len(judged)} "
            f"({match / max(len(judged), 1):.0%}) agree.",
        ]
        misses = [k for k in judged if k.bound != k.counter_bound]
        if misses:
            out += ["", "| kernel | model | ncu |", "|---|---|---|"]
            out += [f"| `{k.key[:70]}` | {k.bound} | {k.counter_bound} |" for k in misses[:20]]
        every = [k for c in first.cases if c.status == "ok" for k in c.kernels]
        if every and all(k.duration_us.median == 0 for k in every):
            out += [
                "",
                f"**Not measured**: every one of the run's {len(every)} kernels read 0 µs (its later rounds' traces "
                "caught no GPU activity and were pooled as zeros), so no kernel was heavy and ncu had nothing to "
                "replay. Fixed since (`attnprof/core/measure/trace.py` exports each round's trace as it ends; "
                "`kernel_rounds.py` leaves out a round that caught no kernel); to be measured again.",
            ]
    return out


def advice_section(folder: Folder) -> list[str]:
    path = folder.path / "advice.json"
    if not path.is_file():
        return ["(no advice run)"]
    doc = load_result(path)
    out = [
        "| user call | rule | advice | promised (µs) | the call as it is (µs) | applied by hand: case (µs) | "
        "promised / by hand |",
        "|---|---|---|---|---|---|---|",
    ]
    for user, fixed, rule, words in PAIRS:
        case, by_hand = doc.case(user), doc.case(fixed)
        tried = [a for a in (case.advice or []) if a.rule == rule and words in a.suggestion] if case else []
        measured = _median(by_hand)
        if not tried or measured is None:
            status = case.status if case else "missing"
            out.append(f"| {user} | {rule} | (not tried: {status}) | | {_median(case) or '—'} | {measured or '—'} | |")
            continue
        best = min(tried, key=lambda a: a.alternative_us)
        ratio = best.alternative_us / measured if measured else float("nan")
        mark = "" if best.helps else " (did not help: not advised)"
        out.append(
            f"| {user} | {rule} | {best.suggestion[:70]}{mark} | {best.alternative_us:,.1f} | {best.current_us:,.1f} | "
            f"{measured:,.1f} | {ratio:.2f} |"
        )
    return out


def render(folders: list[Folder], argv: list[str]) -> str:
    out = [
        "# Advice you can act on: measured on GPUs",
        "",
        "Produced by `bash bench/advice_gpu.sh` on each GPU host (through the device tool), then here:",
        "",
        f"```sh\npython -m bench.advice_report {' '.join(argv)}\n```",
    ]
    for folder in folders:
        out += [
            "",
            f"## {folder.gpu} ({folder.when})",
            "",
            "### Why SDPA refused a backend",
            "",
            *sdpa_section(folder),
            "",
            "### Counter cache: coverage and cost",
            "",
            "The example suite (`examples/llama7b.toml`), three processes in a row on one cache folder; wall time of "
            "each whole process.",
            "",
            *counters_section(folder),
            "",
            "### Advice against the change applied by hand",
            "",
            "`bench/advice/suite.toml`: each user call beside the same call changed by hand as the advice says. "
            "*promised*: the advice's own timing of the changed call, in the user's case; *applied by hand*: the "
            "median latency of the changed case, profiled apart.",
            "",
            *advice_section(folder),
        ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("bench/reports/advice.md"))
    args = parser.parse_args(argv)
    folders = [Folder.read(p) for p in args.folders]
    shown = [str(p) for p in args.folders] + ["--out", str(args.out)]
    args.out.write_text(render(folders, shown))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
