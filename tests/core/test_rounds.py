"""A case's rounds: their medians, the levels they land on, and what the report and a comparison make of them.

Synthetic rounds check the rule both ways (noise alone is never cut into levels; two builds' levels are found); the
H200 documents of ``bench/reports/data/h200-truth-2026-12-04`` and ``-b`` (ten processes of one lease, ten rounds
each, behind ``bench/reports/h200-truth.md``) check it on rounds a real profile took.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from attnprof.core.analysis import compare
from attnprof.core.documents import LatencyStats, ResultDocument, load_result
from attnprof.core.report import levels_line, render_markdown
from attnprof.core.rounds import LEVEL_GAP, find_levels, median_ci, relative_ci_half_width, round_levels, round_medians
from tests.core.result_documents import make_case, make_doc, stats_of

REPO = Path(__file__).resolve().parents[2]
TRUTH = REPO / "bench" / "reports" / "data" / "h200-truth-2026-12-04"
ROUNDS_DATA = (TRUTH, TRUTH.with_name(TRUTH.name + "-b"))  # two five-process runs, one after the other, one GPU


def rounds_of(levels: list[float], *, n: int = 40, cv: float = 0.008, seed: int = 0) -> LatencyStats:
    """Samples of one run whose round ``i`` sits at ``levels[i]`` (µs), ``n`` lognormal samples a round."""
    rng = np.random.default_rng(seed)
    samples = [float(v) for level in levels for v in level * np.exp(cv * rng.standard_normal(n))]
    stats = stats_of(samples)
    return stats.model_copy(update={"rounds": len(levels), "round_samples": [n] * len(levels)})


def test_round_medians_follow_the_recorded_counts_in_time_order() -> None:
    stats = stats_of([1.0, 2.0, 3.0, 10.0, 11.0, 30.0, 31.0, 32.0, 33.0])
    stats = stats.model_copy(update={"rounds": 3, "round_samples": [3, 2, 4]})
    assert round_medians(stats) == [2.0, 10.5, 31.5]
    assert round_medians(stats.model_copy(update={"round_samples": None})) is None


def test_the_median_interval_is_distribution_free_and_narrows_with_samples() -> None:
    assert median_ci([1.0, 2.0]) == (1.0, 2.0)
    xs = [float(i) for i in range(1, 101)]
    low, high = median_ci(xs)
    assert low < 50.5 < high and high - low < 25
    assert relative_ci_half_width(xs * 4) < relative_ci_half_width(xs)


def test_noise_alone_is_never_cut_into_levels() -> None:
    # One level, rounds of 30-100 samples at the H200's within-run CV (0.8%) and at the CPU's (30%): no levels.
    rng = np.random.default_rng(7)
    found = 0
    for trial in range(400):
        cv = 0.008 if trial % 2 else 0.3
        stats = rounds_of([100.0] * 10, n=int(rng.integers(30, 101)), cv=cv, seed=trial)
        found += round_levels(stats) is not None
    assert found == 0


def test_two_levels_of_builds_are_found_with_their_span() -> None:
    found = []
    for seed in range(200):
        levels = [100.0] * 5 + [102.5] * 5
        np.random.default_rng(seed).shuffle(levels)
        found.append(round_levels(rounds_of(levels, seed=seed)))
    hits = [lv for lv in found if lv is not None]
    assert len(hits) >= 190
    assert all(len(lv.levels) == 2 and [x.rounds for x in lv.levels] == [5, 5] for lv in hits)
    assert statistics.median(lv.span for lv in hits) == pytest.approx(0.025, abs=0.002)
    text = hits[0].describe()
    assert text.startswith("rounds on 2 levels 2.") and " apart (" in text and text.count("×5") == 2


def test_a_single_odd_round_is_not_a_level_and_few_rounds_show_none() -> None:
    assert round_levels(rounds_of([100.0] * 9 + [106.0])) is None  # one slow round
    assert round_levels(rounds_of([100.0, 100.0, 106.0])) is None  # three rounds cannot hold two levels of two
    assert find_levels([100.0, 100.0, 106.0, 106.0], [0.001] * 4) is not None
    # A gap under LEVEL_GAP never cuts, however precise the rounds.
    assert find_levels([100.0, 100.0, 100.0 * (1 + LEVEL_GAP * 0.9)] * 2, [0.0] * 6) is None
    # A gap over LEVEL_GAP but within twice the rounds' own half-width does not either.
    assert find_levels([100.0, 100.0, 102.0, 102.0], [0.015] * 4) is None
    assert find_levels([100.0, 100.0, 102.0, 102.0], [0.004] * 4) is not None
    # Groups of one round are listed with the recurring levels; the span runs between recurring levels only.
    lv = find_levels([95.0, 100.0, 100.0, 104.0, 104.0, 110.0], [0.002] * 6)
    assert lv is not None and [x.rounds for x in lv.levels] == [1, 2, 2, 1]
    assert lv.span == pytest.approx(0.04)


def _h200_cases() -> list[tuple[str, LatencyStats]]:
    out = []
    for path in [p for folder in ROUNDS_DATA for p in sorted(folder.glob("run*/*.json.gz"))]:
        if "dobench" in path.name:
            continue
        for case in load_result(path).cases:
            if case.latency_us is not None and case.latency_us.round_samples:
                out.append((case.id, case.latency_us))
    return out


def test_h200_rounds_levels_are_found_where_builds_differ_and_nowhere_else() -> None:
    found: dict[str, list[bool]] = {}
    for case_id, latency in _h200_cases():
        found.setdefault(case_id, []).append(round_levels(latency) is not None)
    assert len(found) == 45 and sum(len(v) for v in found.values()) == 45 * 10
    # Two cases land their builds on levels in every process: cuDNN's MQA decode and hd256 through the efficient path.
    assert all(found["decode-mqa[backend=cudnn]"])
    assert all(found["hd256[backend=efficient]"])
    # The math path's short sequences in 7 of 10 (levels 3-8% apart), non-causal cross-attention through flash in 3
    # (two or three builds of ten 1.4-1.7% faster); hd256 through flash and the block once at most.
    assert sum(found["short[backend=math]"]) == 7
    assert sum(found["cross[backend=flash,causal=false]"]) == 3
    assert sum(found["hd256[backend=flash]"]) <= 1 and sum(found["block"]) <= 1
    # The other 39 cases never, in ten processes each.
    flagged = {case_id for case_id, hits in found.items() if any(hits)}
    assert flagged == {
        "decode-mqa[backend=cudnn]",
        "hd256[backend=efficient]",
        "short[backend=math]",
        "cross[backend=flash,causal=false]",
        "hd256[backend=flash]",
        "block",
    }


def test_the_report_prints_the_levels_under_the_case() -> None:
    doc = load_result(TRUTH / "run1" / "llama7b.json.gz")
    mqa = doc.case("decode-mqa[backend=cudnn]")
    assert mqa is not None
    line = levels_line(mqa)
    assert line is not None and line.startswith("LEVELS: rounds on ")
    text = render_markdown(doc)
    assert text.count("LEVELS: ") == sum(levels_line(c) is not None for c in doc.cases)
    block = text.split("## decode-mqa[backend=cudnn]")[1].split("## ")[0]
    assert line in block
    sdpa = doc.case("sdpa[backend=cudnn,pass=fwd]")
    assert sdpa is not None and levels_line(sdpa) is None


def _doc(run_id: str, latency: LatencyStats, bound: str = "latency") -> object:
    case = make_case("hd256[backend=efficient]", median_us=latency.median, bound=bound)
    return make_doc(run_id, [case.model_copy(update={"latency_us": latency})])


def _timing(c: object) -> object:
    return next(f for f in c.findings if f.metric in ("latency", "bandwidth", "throughput"))  # type: ignore[attr-defined]


EVEN = [100.0] * 5 + [105.0] * 5  # rounds split evenly between two levels 5% apart
UPPER = [100.0] * 3 + [105.0] * 7  # the same levels, seven rounds of ten on the upper one


def test_a_shift_the_levels_can_make_warns_instead_of_failing() -> None:
    # Baseline runs split evenly, the candidate drew seven rounds of the upper level: its median reads ~2.3% higher,
    # which the baselines' own draws allow (each could have drawn that mix).
    base = [_doc(f"b{i}", rounds_of(EVEN, seed=i)) for i in range(3)]
    cand = _doc("c", rounds_of(UPPER, seed=9))
    c = compare(base, cand)  # type: ignore[arg-type]
    f = _timing(c)
    assert f.change is not None and f.change > 0.02  # type: ignore[attr-defined]
    assert f.status == "inconclusive" and f.verdict == "warn" and c.verdict == "warn"  # type: ignore[attr-defined]
    detail = f.detail or ""  # type: ignore[attr-defined]
    assert "the rounds of 3 baseline run(s) and the candidate (rounds on 2 levels" in detail
    assert "a change that another draw of levels could make is not confirmed" in detail


def one_case(doc: ResultDocument, case_id: str, *, strip: bool = False, factor: float = 1.0) -> ResultDocument:
    """``doc`` with one case, its samples times ``factor``, its round counts dropped when ``strip``."""
    case = doc.case(case_id)
    assert case is not None and case.latency_us is not None
    lat = case.latency_us.model_copy(
        update={
            "samples": [x * factor for x in case.latency_us.samples],
            "median": case.latency_us.median * factor,
            "round_samples": None if strip else case.latency_us.round_samples,
        }
    )
    return doc.model_copy(update={"cases": [case.model_copy(update={"latency_us": lat})]})


def _mqa(run: str, *, strip: bool = False, factor: float = 1.0) -> ResultDocument:
    doc = load_result(TRUTH / run / "llama7b.json.gz")
    return one_case(doc, "decode-mqa[backend=cudnn]", strip=strip, factor=factor)


def test_h200_runs_of_unchanged_code_whose_levels_differ_warn_and_a_regression_fails() -> None:
    # cuDNN's MQA decode, two processes of one command: the first drew its levels otherwise (bandwidth -5.6%).
    c = compare([_mqa("run2")], _mqa("run1"))
    f = _timing(c)
    assert f.metric == "bandwidth" and f.status == "inconclusive" and c.verdict == "warn"  # type: ignore[attr-defined]
    assert f.change is not None and f.change < -0.05  # type: ignore[attr-defined]
    # Without the round counts (as documents were before) the same two runs fail.
    assert compare([_mqa("run2", strip=True)], _mqa("run1", strip=True)).verdict == "fail"
    # A 15% slowdown of the candidate is beyond what the levels allow.
    slow = compare([_mqa("run2")], _mqa("run1", factor=1.15))
    assert _timing(slow).status == "regressed" and slow.verdict == "fail"  # type: ignore[attr-defined]


def test_the_allowance_is_on_the_latency_scale_for_rates_too() -> None:
    base = [_doc(f"b{i}", rounds_of(EVEN, seed=i), "memory") for i in range(3)]
    f = _timing(compare(base, _doc("c", rounds_of(UPPER, seed=9), "memory")))  # type: ignore[arg-type]
    assert f.metric == "bandwidth" and f.change is not None and f.change < -0.02  # type: ignore[attr-defined]
    assert f.status == "inconclusive" and f.verdict == "warn"  # type: ignore[attr-defined]


def test_a_regression_beyond_what_the_levels_allow_still_fails() -> None:
    base = [_doc(f"b{i}", rounds_of(EVEN, seed=i)) for i in range(3)]
    cand = _doc("c", rounds_of([x * 1.08 for x in EVEN], seed=9))
    c = compare(base, cand)  # type: ignore[arg-type]
    assert _timing(c).status == "regressed" and c.verdict == "fail"  # type: ignore[attr-defined]


def test_three_odd_rounds_of_ten_make_a_baseline_too_imprecise_to_fail_a_fifteen_percent_change() -> None:
    # The price, as docs/regression-method.md states it: the median of such a run moves with the odd rounds in 15% of
    # draws of ten, so one such baseline cannot confirm a 15% slowdown; it warns. Three ordinary baselines can.
    odd = [100.0] * 7 + [125.0] * 3
    cand = _doc("c", rounds_of([115.0] * 10, seed=9))
    lone = compare([_doc("b0", rounds_of(odd, seed=1))], cand)  # type: ignore[arg-type]
    assert _timing(lone).status == "inconclusive" and lone.verdict == "warn"  # type: ignore[attr-defined]
    plain = compare([_doc(f"b{i}", rounds_of([100.0] * 10, seed=i)) for i in range(3)], cand)  # type: ignore[arg-type]
    assert _timing(plain).status == "regressed" and plain.verdict == "fail"  # type: ignore[attr-defined]


def test_a_few_odd_rounds_allow_little() -> None:
    # Two rounds of ten 25% slow (a co-tenant, say) make two levels, but the median of the pooled samples moves with
    # them only in the few draws where they are the majority: a real 20% slowdown fails.
    odd = [100.0] * 8 + [125.0] * 2
    for seed in range(5):
        baseline = rounds_of(odd, seed=seed)
        assert round_levels(baseline) is not None
        c = compare([_doc("b0", baseline)], _doc("c", rounds_of([120.0] * 10, seed=9 + seed)))  # type: ignore[arg-type]
        assert _timing(c).status == "regressed" and c.verdict == "fail"  # type: ignore[attr-defined]


def test_resampling_the_rounds_leaves_every_other_draw_as_it_was() -> None:
    # With and without round counts: the case without levels compares the same, and so does the variance finding of
    # the case with them (it draws from the case's stream after the timing finding: the rounds' resampling has a
    # generator of its own). Only q-values move: one Benjamini-Hochberg family holds every p-value of the comparison.
    def run(run_id: str, levels: list[float], seed: int, strip: bool) -> object:
        with_levels = rounds_of(levels, seed=seed)
        flat = rounds_of([100.0] * 10, seed=seed + 100)
        if strip:
            with_levels = with_levels.model_copy(update={"round_samples": None})
            flat = flat.model_copy(update={"round_samples": None})
        a = make_case("hd256[backend=efficient]", median_us=with_levels.median).model_copy(
            update={"latency_us": with_levels}
        )
        b = make_case("hd96[backend=cudnn]", median_us=flat.median).model_copy(update={"latency_us": flat})
        return make_doc(run_id, [a, b])

    def kept(strip: bool) -> list[dict[str, object]]:
        c = compare([run(f"b{i}", EVEN, i, strip) for i in range(3)], run("c", UPPER, 9, strip))  # type: ignore[arg-type]
        return [
            f.model_dump(exclude={"q"})
            for f in c.findings
            if f.case == "hd96[backend=cudnn]" or (f.case == "hd256[backend=efficient]" and f.metric == "variance")
        ]

    assert len(kept(False)) == 3 and kept(False) == kept(True)
