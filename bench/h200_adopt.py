"""Should the runner take up a way of timing? The rule, set before the lease that decides it, applied to its data.

    python bench/h200_adopt.py DATA --keep reuse --candidate stream [--min-processes 8]

DATA holds ``bench/h200_redraw.py`` processes over both suites, one lease, the two variants in turn
(``REDRAW_SUITES='examples/llama7b.toml bench/validation/suite.toml' REDRAW_VARIANTS='stream reuse'
bash bench/h200_truth.sh redraw N``: ``DATA/{llama7b,validation}/<label>-<pid>.json.gz``). Over the cases of
100 µs and more, the candidate is taken up only if both hold:

  1. the expected number of cases within 0.5% over every five processes rises (each case's share of its
     five-process subsets within the spread target, summed over the cases), and
  2. the 95% bootstrap interval of the geometric mean of the per-case standard-deviation ratios (candidate over
     kept, each group's medians about its own median, the processes resampled) lies below 1,

and each side has at least ``--min-processes`` processes (five or more) and every case the kept side ran. The
cases are those of 100 µs and more as the runner reads them now (the kept processes' median); ties keep the runner
as it is. ``bench/reports/h200-stream.md`` (section 5) sets this rule for a new stream per case-round;
``bench/h200_placement_report.py`` applies the same measures to rounds placed anew. Prints the measures and the
verdict as Markdown; exits 0 either way, 2 when the data cannot decide (too few processes, a variant or a case
missing).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.h200_placement_report import load_both, sd_ratio_ci, sd_ratio_p  # noqa: E402
from bench.h200_rounds_report import FIVE, Process, heavy, median_of, share_within  # noqa: E402

MIN_PROCESSES = 8  # a side's processes the rule asks for by default


@dataclass(frozen=True)
class Decision:
    cases: int
    processes: tuple[int, int]
    expected: tuple[float, float]  # kept, candidate: cases expected within the target over every five
    ratio: float  # candidate sd / kept sd, geometric mean over the cases
    interval: tuple[float, float]
    p: float

    @property
    def adopt(self) -> bool:
        return self.expected[1] > self.expected[0] and self.interval[1] < 1.0


def cases_to_decide(kept: list[Process], candidate: list[Process]) -> tuple[list[str], list[str]]:
    """The cases the rule weighs (100 µs and more in the kept processes, the runner's numbers as they are) and those
    of them the candidate's processes lack (any: the data cannot decide)."""
    ids = heavy(kept)
    return ids, [i for i in ids if not all(i in p.cases for p in candidate)]


def decide(kept: list[Process], candidate: list[Process]) -> Decision:
    """The rule's measures over :func:`cases_to_decide`'s cases (which the candidate must hold every one of)."""
    ids, lacking = cases_to_decide(kept, candidate)
    if lacking or not ids:
        raise ValueError(f"cannot decide: {len(ids)} cases of 100 µs and more, the candidate lacks {lacking}")
    expected = tuple(
        sum(share_within([median_of(p.cases[i]) for p in group]) for i in ids) for group in (kept, candidate)
    )
    ratio, _, p = sd_ratio_p(kept, candidate, ids)
    return Decision(
        len(ids), (len(kept), len(candidate)), (expected[0], expected[1]), ratio, sd_ratio_ci(kept, candidate, ids), p
    )


def render(d: Decision, keep: str, candidate: str) -> str:
    low, high = d.interval
    return "\n".join(
        [
            "| processes | n | cases ≥ 100 µs expected within 0.5% over every five |",
            "|---|---:|---:|",
            f"| {keep} | {d.processes[0]} | {d.expected[0]:.1f}/{d.cases} |",
            f"| {candidate} | {d.processes[1]} | {d.expected[1]:.1f}/{d.cases} |",
            "",
            f"Standard deviation, {candidate} over {keep}: {d.ratio:.2f} (geometric mean over {d.cases} cases; 95% "
            f"bootstrap interval {low:.2f}–{high:.2f}; permutation p = {d.p:.3f}).",
            "",
            f"Verdict: {'take up' if d.adopt else 'keep'} `{candidate if d.adopt else keep}`"
            + (
                ""
                if d.adopt
                else " ("
                + "; ".join(
                    reason
                    for reason, failed in (
                        ("the expected count did not rise", d.expected[1] <= d.expected[0]),
                        (f"the interval reaches {high:.2f}, not below 1", high >= 1.0),
                    )
                    if failed
                )
                + ")"
            )
            + ".",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--keep", required=True, help="the label of the processes timed as the runner does now")
    parser.add_argument("--candidate", required=True, help="the label of the processes timed the proposed way")
    parser.add_argument("--min-processes", type=int, default=MIN_PROCESSES)
    args = parser.parse_args()
    groups = load_both(args.data)
    missing = [v for v in (args.keep, args.candidate) if v not in groups]
    if missing:
        print(f"{args.data}: no processes labelled {', '.join(missing)} (found: {', '.join(sorted(groups))})")
        return 2
    if args.min_processes < FIVE:
        print(f"--min-processes {args.min_processes}: the rule counts five-process subsets, so at least {FIVE}")
        return 2
    short = [v for v in (args.keep, args.candidate) if len(groups[v]) < args.min_processes]
    if short:
        counts = ", ".join(f"{v} {len(groups[v])}" for v in short)
        print(f"{args.data}: too few processes to decide ({counts}; --min-processes {args.min_processes})")
        return 2
    ids, lacking = cases_to_decide(groups[args.keep], groups[args.candidate])
    if not ids:
        print(f"{args.data}: no case of 100 µs and more in every `{args.keep}` process: nothing to decide on")
        return 2
    if lacking:
        print(
            f"{args.data}: the `{args.candidate}` processes lack {len(lacking)} of the {len(ids)} cases: "
            f"{', '.join(lacking[:5])}{' ...' if len(lacking) > 5 else ''} (both suites, in every process)"
        )
        return 2
    print(render(decide(groups[args.keep], groups[args.candidate]), args.keep, args.candidate))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
