"""The paired run's defaults per case (warm-up, a device-time budget with a floor and a ceiling in pairs, the change
decision split over the run's cases): what they catch, what they cost, and the figures behind them.

    python -m bench.paired_budget [--quick] [--out bench/reports/paired-budget.md]

Every decision is the committed code's: the sequential rule (``attnprof.core.analysis.paired_stats``) as the
coordinator builds it (``attnprof.core.measure.paired.case_rule``), and in section 4 the coordinator's own case loop
(``attnprof.core.measure.paired_case.run_case``) and the analysis (``attnprof.core.analysis.paired.compare_paired``'s
Benjamini-Hochberg step, ``analysis.stats.benjamini_hochberg``) on a simulated device.

1. The H200 recordings (bench/reports/data/h200-paired-2026-12-02/paired-costs.tar.gz: 40 pairs per case and run,
   ``attnprof ab --record``, three cases, 10 runs each): the pair spread per case (sd of ln(head/base)), how far the
   same side's consecutive rounds lie apart (what the warm-up tolerance must admit), and how many warm-up rounds the
   detector would take on each recording's own first rounds.
2. Pairs needed: normal pair noise of spread s (and the decode case's order effect: the side that times second reads
   0.4% slower, so AB pairs read 0.8% above BA ones), +1% planted; the share called slower by a rule planned up to P
   pairs, for a family of m cases; the least P that reaches 95%.
3. The recordings resampled: every stretch of P pairs starting on an AB pair (read circularly), moved to exactly +1%
   for detection and as recorded for A/A, at the P the defaults give a case of the recorded suite.
4. End to end, simulated: a two-case job (a decode step whose pairs spread 0.8%, with the order effect, and a Triton
   kernel at 0.4%); the decode case starts disturbed (each side's first two or three rounds 19% slow, each with 2% noise
   of its own), planted +0%, +1%, +1.8%, +5.5%; the rounds and warm-ups run by the coordinator's loop at the defaults,
   then the verdict over both cases; beside it the old defaults (at most 7 pairs, no warm-up, the error per case).
   The device time of a pair is taken equal to one round of an unpaired profile (each side builds at once, then
   times half a profile round), so a case's cost reads in units of its unpaired rounds. The same jobs again with the
   set-aside test as the CPU hosts have it (a 1.5x floor, no prior spread), to show what CUDA's floor and prior do.
5. What a job costs: the pairs and warm-ups of section 4 in units of the unpaired profile's rounds, and the recorded
   H200 leases' process and case wall times turned into a job estimate for the recorded suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import tarfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import attnprof.core.analysis.paired_stats as ps
from attnprof.core.analysis.paired_plan import Budget, steady, warmup_tolerance
from attnprof.core.analysis.stats import benjamini_hochberg
from attnprof.core.measure.paired import case_rule
from attnprof.core.measure.paired_case import CaseRounds, run_case
from attnprof.core.suite import TimingConfig
from bench import quick

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT / "bench" / "reports" / "data" / "h200-paired-2026-12-02"
DEFAULTS = TimingConfig()
MIN_EFFECT = 0.005
ALPHA = 0.05
# The defaults before: at most 1.5x the suite's rounds (5: 7 pairs), looks every two pairs, the error per case.
OLD = ps.Rule(MIN_EFFECT, ALPHA, min_pairs=4, max_pairs=7, max_set_aside=1)


def _members(path: Path) -> dict[str, bytes]:
    out = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m) if m.isfile() and m.name.endswith((".json", ".jsonl")) else None
            if f is not None:
                out[m.name.removeprefix("raw/")] = f.read()
    return out


def recordings() -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    """(variant, case) -> each recorded run's pairs (40 a case)."""
    files = _members(DATA / "paired-costs.tar.gz")
    out: dict[tuple[str, str], list[list[dict[str, Any]]]] = defaultdict(list)
    for name in sorted(files):
        if name.startswith("ab-") and name.endswith("/paired.json"):
            variant = name[3:].split("/")[0]
            variant = "aa" if variant.startswith("aa") else variant.rstrip("b")
            for case in json.loads(files[name])["cases"]:
                out[(variant, case["case"])].append(case["pairs"])
    return out


def _d(pairs: list[dict[str, Any]]) -> list[float]:
    return [math.log(p["head_us"] / p["base_us"]) for p in pairs]


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


# 1. ------------------------------------------------------------------------------------------------------------


def spreads(recs: dict[tuple[str, str], list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    tol = warmup_tolerance(MIN_EFFECT)
    rows = []
    for case in ("fused", "decode", "triton"):
        runs = [r for (v, c), rs in recs.items() if c == case for r in rs]
        sds = [statistics.stdev(_d(r)) for r in runs]
        steps = sorted(
            abs(math.log(r[i][side] / r[i - 1][side]))
            for r in runs
            for side in ("base_us", "head_us")
            for i in range(1, len(r))
        )
        # The detector on each recording's first rounds, as warm-up rounds.
        warm = []
        for r in runs:
            for k in range(2, 7):
                if steady([p["base_us"] for p in r[:k]], [p["head_us"] for p in r[:k]], tol) or k == 6:
                    warm.append(k)
                    break
        rows.append(
            {
                "case": case,
                "runs": len(runs),
                "sd_min": min(sds),
                "sd_median": statistics.median(sds),
                "sd_max": max(sds),
                "step_p50": steps[len(steps) // 2],
                "step_p95": steps[int(0.95 * len(steps))],
                "within_tol": sum(s <= math.log1p(tol) for s in steps) / len(steps),
                "warmup_mean": statistics.fmean(warm),
                "warmup_bound": sum(k == 6 for k in warm),
            }
        )
    return rows


# 2. ------------------------------------------------------------------------------------------------------------


def needed(sds: tuple[float, ...], families: tuple[int, ...], plans: tuple[int, ...], n: int) -> list[dict[str, Any]]:
    rows = []
    for s in sds:
        for m in families:
            rates = {}
            for p in plans:
                rule = case_rule(MIN_EFFECT, ALPHA, p, "cuda", family=m)
                rng = np.random.default_rng(1000 * p + m + int(1e5 * s))
                d = math.log(1.01) + rng.normal(0.0, s, (n, p + rule.max_set_aside))
                d += np.where(np.arange(d.shape[1]) % 2 == 0, 0.004, -0.004)  # AB pairs 0.8% above BA ones
                rates[p] = _share([ps.replay([float(x) for x in row], rule) for row in d], "slower")
            least = next((p for p in plans if rates[p] >= 0.95), None)
            rows.append({"sd": s, "family": m, "rates": rates, "least": least})
    return rows


# 3. ------------------------------------------------------------------------------------------------------------


def resampled(recs: dict[tuple[str, str], list[list[dict[str, Any]]]], plans: dict[str, int]) -> list[dict[str, Any]]:
    """The old rule (``before``: the error per case, one family) and the defaults' planned up to each of ``plans``."""
    rows = []
    old_10 = ps.Rule(MIN_EFFECT, ALPHA, min_pairs=4, max_pairs=15, max_set_aside=3)  # the recorded suite's 10 rounds
    rules = [("before", OLD.max_pairs, 1, OLD), ("before, 10 rounds", old_10.max_pairs, 1, old_10)]
    rules += [
        (label, p, m, case_rule(MIN_EFFECT, ALPHA, p, "cuda", family=m))
        for label, p in plans.items()
        for m in (1, 3, 25)
    ]
    for label, p, m, rule in rules:
        for case in ("fused", "decode", "triton"):
            p1 = [_d(r) for r in recs[("p1", case)]]
            shift = math.log1p(0.01) - statistics.fmean(statistics.fmean(d) for d in p1)
            det = [ps.replay(w, rule) for d in p1 for w in _windows([x + shift for x in d], p + rule.max_set_aside)]
            aa = [ps.replay(w, rule) for r in recs[("aa", case)] for w in _windows(_d(r), p + rule.max_set_aside)]
            rows.append(
                {
                    "plan": label,
                    "pairs": p,
                    "family": m,
                    "case": case,
                    "caught": _share(det, "slower"),
                    "aa_slower": _share(aa, "slower"),
                    "aa_faster": _share(aa, "faster"),
                    "aa_same": _share(aa, "same"),
                    "aa_used": statistics.fmean(a.used for a in aa),
                    "windows": len(aa),
                }
            )
    return rows


def _windows(d: list[float], length: int) -> list[list[float]]:
    return [[d[(start + i) % len(d)] for i in range(length)] for start in range(0, len(d), 2)]


def _share(results: list[ps.Replay], state: str) -> float:
    return sum(r.assessment is not None and r.assessment.state == state for r in results) / len(results)


# 4. ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    effect: float
    spread: float
    order: float = 0.0
    disturbed: bool = False
    slow: float = 0.19
    slow_spread: float = 0.02


class _Device:
    """Round medians of one case (microseconds, base 174) and the seconds each command takes (4 ms to build, 3 ms to
    time a round: a pair as long as one unpaired round)."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator) -> None:
        self.s = scenario
        self.rng = rng
        self.slow_rounds = {side: int(rng.integers(2, 4)) for side in ("base", "head")} if scenario.disturbed else {}
        self.rounds = {"base": 0, "head": 0}
        self.window = 0


class _Side:
    def __init__(self, name: str, device: _Device) -> None:
        self.name = name
        self.device = device

    def send(self, message: dict[str, Any]) -> None:
        pass

    def receive(self, message: dict[str, Any]) -> dict[str, Any]:
        dev, s = self.device, self.device.s
        if message["op"] == "prepare":
            dev.window = 0
            return {"ok": True, "s": 0.004}
        dev.rounds[self.name] += 1
        dev.window += 1
        us = (
            174.0
            * (1 + s.effect if self.name == "head" else 1.0)
            * math.exp(dev.rng.normal(0, s.spread / math.sqrt(2)))
        )
        if dev.rounds[self.name] <= dev.slow_rounds.get(self.name, 0):
            us *= (1 + s.slow) * math.exp(dev.rng.normal(0, s.slow_spread))
        if dev.window == 2:
            us *= 1 + s.order
        return {"ok": True, "median_us": us, "samples": 10, "mhz": None, "s": 0.003}

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.receive(message)


def _case(scenario: Scenario, rng: np.random.Generator, *, old: bool, family: int, rounds: int) -> dict[str, Any]:
    device = _Device(scenario, rng)
    sides = {name: _Side(name, device) for name in ("base", "head")}
    if old:
        case = CaseRounds("case", OLD)
    else:
        case = CaseRounds(
            "case",
            case_rule(MIN_EFFECT, ALPHA, DEFAULTS.paired_max_pairs, "cuda", family=family),
            budget=Budget(DEFAULTS.paired_budget, rounds, DEFAULTS.paired_floor_pairs, DEFAULTS.paired_max_pairs),
            warmup_rounds=DEFAULTS.paired_warmup_rounds,
            warmup_tolerance=warmup_tolerance(MIN_EFFECT),
        )
    rule = run_case(sides, case, stop_early=True, first_apart=True, on_pair=lambda: None)
    kept = [p for p in case.pairs if p.disturbed is None]
    final = ps.assess([math.log(p.head_us / p.base_us) for p in kept], rule, final=True)
    return {
        "state": case.stopped_by,
        "change": final.change,
        "p": 1.0 if final.state == "same" else final.p,
        "warmup": len(case.warmup),
        "pairs": len(case.pairs),
        "units": len(case.warmup) + len(case.pairs),
    }


def job(effect: float, seed: int, *, old: bool, rounds: int = 5) -> dict[str, Any]:
    """A two-case job: the disturbed decode step with ``effect`` and an unchanged Triton kernel; its verdict as
    ``compare_paired`` gives it (Benjamini-Hochberg over the two cases, the minimum effect)."""
    rng = np.random.default_rng(seed)
    decode = _case(Scenario(effect, 0.008, 0.004, disturbed=True), rng, old=old, family=2, rounds=rounds)
    triton = _case(Scenario(0.0, 0.004), rng, old=old, family=2, rounds=rounds)
    q = benjamini_hochberg([decode["p"], triton["p"]])
    regressed = [c["change"] >= MIN_EFFECT and qi <= ALPHA for c, qi in zip((decode, triton), q, strict=True)]
    return {"decode": decode, "triton": triton, "regressed": regressed, "q": q[0]}


def end_to_end(effects: tuple[float, ...], n: int, rounds: int = 5) -> list[dict[str, Any]]:
    rows = []
    for old in (True, False):
        for effect in effects:
            jobs = [job(effect, 7919 * i + int(1e4 * effect), old=old, rounds=rounds) for i in range(n)]
            said = Counter(j["decode"]["state"] for j in jobs)
            rows.append(
                {
                    "rules": "before" if old else "now",
                    "effect": effect,
                    "n": n,
                    "regressed": sum(j["regressed"][0] for j in jobs) / n,
                    "job_failed": sum(any(j["regressed"]) for j in jobs) / n,
                    "slower_not_regressed": sum(
                        j["decode"]["state"] == "slower" and not j["regressed"][0] for j in jobs
                    )
                    / n,
                    "stopped": dict(said),
                    "warmup": statistics.fmean(j["decode"]["warmup"] for j in jobs),
                    "pairs": statistics.fmean(j["decode"]["pairs"] for j in jobs),
                    "units_decode": statistics.fmean(j["decode"]["units"] for j in jobs),
                    "units_triton": statistics.fmean(j["triton"]["units"] for j in jobs),
                }
            )
    return rows


def set_aside_variants(n: int) -> list[dict[str, Any]]:
    """Section 4's jobs again with the set-aside test as the CPU hosts have it (a 1.5x floor, no prior spread)."""
    global case_rule
    committed = case_rule

    def cpu_like(*args: Any, **kwargs: Any) -> ps.Rule:
        return dataclasses.replace(committed(*args, **kwargs), disturbed_factor=1.5, spread_prior=0.0)

    try:
        case_rule = cpu_like
        return [r for r in end_to_end((0.0, 0.01, 0.055), n) if r["rules"] == "now"]
    finally:
        case_rule = committed


# 5. ------------------------------------------------------------------------------------------------------------


def leases() -> dict[str, Any]:
    """Process and case wall times of the last cost lease (sides ending without the interpreter's teardown), and a
    per-case pair cost fitted over every job-like run's case walls (wall = first builds + pairs x pair)."""
    files = _members(DATA / "paired-jobs-exit.tar.gz")
    walls = [json.loads(line) for line in files["walls.jsonl"].decode().splitlines()]
    profile = [w["wall_s"] for w in walls if w["step"].startswith("jobs-profile")]
    ab = [
        w["wall_s"]
        for w in walls
        if w["step"].startswith("jobs-") and "profile" not in w["step"] and "together" not in w["step"]
    ]
    points: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for tar in ("paired-jobs-exit", "paired-trials", "paired-jobs-finish", "paired-jobs-warm"):
        for name, data in _members(DATA / f"{tar}.tar.gz").items():
            if name.endswith("/paired.json") and "together" not in name:
                for c in json.loads(data)["cases"]:
                    points[c["case"]].append((len(c["pairs"]), c["wall_s"]))
    fits = {}
    for case, xy in points.items():
        x = np.array([p for p, _ in xy], float)
        y = np.array([w for _, w in xy], float)
        slope, first = np.polyfit(x, y, 1)
        fits[case] = {"pair_s": float(slope), "first_s": float(first), "runs": len(xy), "pairs_mean": float(x.mean())}
    return {"profile_s": profile, "ab_s": ab, "fits": fits}


# the report -----------------------------------------------------------------------------------------------------


def report(out: dict[str, Any], args: argparse.Namespace) -> str:
    lines: list[str] = []
    w = lines.append
    w("# Paired runs at the defaults: warm-up, a device-time budget, one story from pairs to verdict")
    w("")
    w(
        f"`python -m bench.paired_budget{' --quick' if args.quick else ''}` on "
        f"{datetime.now(UTC):%Y-%m-%d} ({out['wall_s']:.0f} s, CPU only). Method: the top of `bench/paired_budget.py`."
    )
    w(
        f"Defaults measured: budget {DEFAULTS.paired_budget:g}x a case's unpaired rounds, floor "
        f"{DEFAULTS.paired_floor_pairs} and ceiling {DEFAULTS.paired_max_pairs} pairs, at most "
        f"{DEFAULTS.paired_warmup_rounds} warm-up rounds a side, tolerance {_pct(warmup_tolerance(MIN_EFFECT), 0)}; "
        f"looks at {case_rule(MIN_EFFECT, ALPHA, 40, 'cuda', family=1).looks} up to the ceiling; a change called at "
        f"alpha {ALPHA:g} / (cases x looks), the same within {_pct(MIN_EFFECT)} at alpha / looks."
    )
    w("")
    w("## 1. The H200 recordings")
    w("")
    w(
        "| case | runs | pair sd (min, median, max) | same side, consecutive rounds apart: median, 95th pct | "
        "within the tolerance | warm-up rounds on the recordings' first rounds (mean; bound reached) |"
    )
    w("|---|---:|---|---|---:|---|")
    for r in out["spreads"]:
        w(
            f"| {r['case']} | {r['runs']} | {_pct(r['sd_min'], 2)}, {_pct(r['sd_median'], 2)}, {_pct(r['sd_max'], 2)} "
            f"| {_pct(r['step_p50'], 2)}, {_pct(r['step_p95'], 2)} | {_pct(r['within_tol'])} | "
            f"{r['warmup_mean']:.2f}; {r['warmup_bound']} of {r['runs']} |"
        )
    w("")
    w("## 2. Pairs needed to settle +1%")
    w("")
    plans = sorted(next(iter(out["needed"]))["rates"])
    w(
        f"Normal pair noise of the sd named, AB pairs 0.8% above BA ones (the decode case's order effect), "
        f"{args.sequences:,} sequences a cell; the share of +1% called slower by a rule planned up to P pairs."
    )
    w("")
    w("| pair sd | cases (family) | " + " | ".join(f"P={p}" for p in plans) + " | least P for 95% |")
    w("|---:|---:|" + "---:|" * len(plans) + "---:|")
    for r in out["needed"]:
        w(
            f"| {_pct(r['sd'])} | {r['family']} | "
            + " | ".join(_pct(r["rates"][p]) for p in plans)
            + f" | {r['least'] or f'> {plans[-1]}'} |"
        )
    w("")
    w("## 3. The recordings resampled")
    w("")
    w(
        "Every stretch of P pairs (plus the set-aside allowance) starting on an AB pair, circularly: 20 per recording, "
        "overlapping, so the rates rest on few independent runs (4 planted, 5 A/A recordings a case)."
    )
    w("")
    w("| plan | P | cases | case | +1% caught | A/A slower | A/A faster | A/A same | A/A pairs used |")
    w("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in out["resampled"]:
        w(
            f"| {r['plan']} | {r['pairs']} | {r['family']} | {r['case']} | {_pct(r['caught'])} "
            f"| {_pct(r['aa_slower'])} | {_pct(r['aa_faster'])} | {_pct(r['aa_same'])} | {r['aa_used']:.1f} |"
        )
    w("")
    w("## 4. End to end: a disturbed start, the coordinator's loop, the verdict")
    w("")
    w(
        f"{args.jobs:,} two-case jobs a row (profile rounds 5, the defaults'). `regressed`: the decode case REGRESSED "
        "in the verdict; `slower, not regressed`: the rounds said slower and the verdict did not confirm it; "
        "`job fails`: any case regressed; pair-units: warm-up pairs plus pairs, each about one unpaired round of "
        "device time."
    )
    w("")
    w(
        "| rules | planted | regressed | slower, not regressed | job fails | how the decode case stopped | "
        "warm-up pairs | pairs | pair-units: decode, triton (unpaired: 5 each) |"
    )
    w("|---|---:|---:|---:|---:|---|---:|---:|---|")
    for r in out["end_to_end"]:
        stopped = ", ".join(f"{k} {v}" for k, v in sorted(r["stopped"].items()))
        w(
            f"| {r['rules']} | {_pct(r['effect'])} | {_pct(r['regressed'])} | {_pct(r['slower_not_regressed'])} | "
            f"{_pct(r['job_failed'])} | {stopped} | {r['warmup']:.1f} | {r['pairs']:.1f} | "
            f"{r['units_decode']:.1f}, {r['units_triton']:.1f} |"
        )
    w("")
    w("With the set-aside test as on the CPU hosts (a 1.5x floor, no prior spread), the same jobs:")
    w("")
    w("| planted | regressed | job fails | how the decode case stopped | pairs |")
    w("|---:|---:|---:|---|---:|")
    for r in out["set_aside"]:
        stopped = ", ".join(f"{k} {v}" for k, v in sorted(r["stopped"].items()))
        w(f"| {_pct(r['effect'])} | {_pct(r['regressed'])} | {_pct(r['job_failed'])} | {stopped} | {r['pairs']:.1f} |")
    w("")
    w("## 5. What a job costs")
    w("")
    c = out["leases"]
    w(
        f"The last cost lease of bench/reports/h200-paired.md (apart builds): unpaired profile processes "
        f"{c['profile_s']} s, paired jobs {c['ab_s']} s (the suite's 10 rounds, at most 15 pairs a case then). "
        "Case walls against pairs over every job-like run (least squares):"
    )
    w("")
    w("| case | runs | pair (s) | first builds and the rest (s) | mean pairs then |")
    w("|---|---:|---:|---:|---:|")
    for case, f in sorted(c["fits"].items()):
        w(f"| {case} | {f['runs']} | {f['pair_s']:.3f} | {f['first_s']:.2f} | {f['pairs_mean']:.1f} |")
    w("")
    for line in out["cost_lines"]:
        w(line)
    w("")
    return "\n".join(lines) + "\n"


def cost_lines(out: dict[str, Any]) -> list[str]:
    """The recorded suite's A/A job at the defaults (its 10 rounds: budget 60 pair-units, so the ceiling), from the
    resampled pairs used and the fitted pair costs."""
    fits = out["leases"]["fits"]
    ceiling = [r for r in out["resampled"] if r["plan"] == "ceiling" and r["family"] == 3]
    old = [r for r in out["resampled"] if r["plan"] == "before, 10 rounds"]
    warm = {r["case"]: r["warmup_mean"] for r in out["spreads"]}
    extra = 0.0
    parts = []
    for now in ceiling:
        was = next(r for r in old if r["case"] == now["case"])
        added = (now["aa_used"] + warm[now["case"]] - was["aa_used"]) * fits[now["case"]]["pair_s"]
        extra += added
        parts.append(
            f"{now['case']} {was['aa_used']:.1f} -> {now['aa_used']:.1f} pairs + {warm[now['case']]:.1f} "
            f"warm-up ({added:+.2f} s)"
        )
    ab = statistics.median(out["leases"]["ab_s"])
    profile = statistics.median(out["leases"]["profile_s"])
    return [
        f"Identical trees of the recorded suite at the defaults (three cases, 10 rounds: the ceiling of 40 pairs): "
        f"{'; '.join(parts)}. The paired job then takes about {ab:.0f} + {extra:.1f} = {ab + extra:.1f} s against "
        f"{profile:.0f} s for one unpaired profile: **{(ab + extra) / profile:.2f}x** (before: {ab / profile:.2f}x), "
        "an estimate from the recorded walls, not a measurement.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer sequences and jobs (about a minute)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "reports" / "paired-budget.md")
    args = parser.parse_args()
    if args.quick:
        named = None if args.out == ROOT / "bench" / "reports" / "paired-budget.md" else args.out
        (args.out,) = quick.place(parser, "paired-budget", (named, "paired-budget.md"))
    args.sequences = 300 if args.quick else 2000
    args.jobs = 150 if args.quick else 1000
    started = time.perf_counter()
    recs = recordings()
    out: dict[str, Any] = {"spreads": spreads(recs)}
    out["needed"] = needed((0.004, 0.008, 0.012), (1, 2, 3, 25), (8, 12, 16, 20, 24, 28, 32, 40), args.sequences)
    r5 = _planned(5)
    out["resampled"] = resampled(recs, {"defaults, 5 rounds": r5, "ceiling": DEFAULTS.paired_max_pairs})
    out["end_to_end"] = end_to_end((0.0, 0.01, 0.018, 0.055), args.jobs)
    out["set_aside"] = set_aside_variants(args.jobs)
    out["leases"] = leases()
    out["cost_lines"] = cost_lines(out)
    out["wall_s"] = time.perf_counter() - started
    text = report(out, args)
    args.out.write_text(text)
    print(text)


def _planned(rounds: int, warmups: int = 2) -> int:
    """The pairs the defaults plan for a case of ``rounds`` profile rounds after ``warmups`` warm-up pairs, a pair
    costing one unpaired round."""
    fits = DEFAULTS.paired_budget * rounds - warmups
    return max(DEFAULTS.paired_floor_pairs, min(DEFAULTS.paired_max_pairs, 2 * math.floor(fits / 2)))


if __name__ == "__main__":
    main()
