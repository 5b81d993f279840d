"""Kernel lines only where the kernel's own samples support them.

The documents under tests/data/kernels/ are a GQA decode step through cuDNN's SDPA on an H100 (the case ~174 µs, its
kernel ~171.4 µs), written by ``write_kernel_fixtures`` below as a current profile records them: every round traces
its iterations, and each kernel holds all of them. ``identical``: the merge base and the head are the same code; the
first two rounds of both sides read about 19% slow (207 µs against 174), and the head's first traced iteration read
its kernel 19% slow (204.0 µs), which is all that an older profile, tracing its first round only, would have read.
``4pct``: the head's kernel 4% slower, tight over eight rounds of three traced iterations. The paired document of
each pair of sides is built here from their rounds.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from attnprof.core.analysis import compare
from attnprof.core.analysis.kernel_samples import change_interval, median_interval, rounds_of
from attnprof.core.analysis.kernels import SPREAD_FACTOR, case_spread, kernel_moves
from attnprof.core.analysis.paired import compare_paired
from attnprof.core.analysis.render import render_table
from attnprof.core.attribution import kernel_key
from attnprof.core.documents import (
    DurationStats,
    Kernel,
    LatencyStats,
    ResultDocument,
    load_result,
    parse_result,
    result_json_schema,
)
from attnprof.core.documents.comparison import ComparisonDocument, Finding
from attnprof.core.documents.paired import Pair, PairedCase, PairedDocument, PairedRule
from attnprof.core.rounds import round_medians
from attnprof.server.github.comment import CommentInput, render
from tests.core.paired_docs import RULE
from tests.core.result_documents import kernel_durations, make_case, make_doc, stats_of

DATA = Path(__file__).resolve().parents[1] / "data" / "kernels"
CASE = "decode[backend=cudnn,kv_heads=8]"
KERNEL = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x64x128_4x1x1_kernel0_0"
ROUNDS = 8
KERNEL_US = 171.4
CASE_US = 174.0
SLOW = 1.19  # the disturbed rounds' factor, case and kernel alike


def _latency(run: str, factors: list[float], *, per_round: int = 25, cv: float = 0.004) -> LatencyStats:
    """The case's samples, ``per_round`` a round around ``CASE_US`` times each round's factor."""
    rng = np.random.default_rng(zlib.crc32(run.encode()))
    samples = [float(CASE_US * f * np.exp(cv * rng.standard_normal())) for f in factors for _ in range(per_round)]
    return stats_of([round(s, 4) for s in samples]).model_copy(
        update={"rounds": len(factors), "round_samples": [per_round] * len(factors)}
    )


def _side(run: str, *, case_factors: list[float], kernel: DurationStats, day: int) -> ResultDocument:
    kernels = [
        Kernel(
            name=KERNEL,
            key=kernel_key(KERNEL),
            phase="fused_attention",
            op="aten::_scaled_dot_product_cudnn_attention",
            launches_per_iter=1,
            duration_us=kernel,
            grid=[8, 32, 1],
            block=[128, 1, 1],
            registers_per_thread=168,
            shared_mem_bytes=98304,
        )
    ]
    case = make_case(CASE, kernels=kernels, bound="memory").model_copy(
        update={"latency_us": _latency(run, case_factors)}
    )
    doc = make_doc(run, [case], day=day)
    env = doc.environment.model_copy(
        update={
            "device": doc.environment.device.model_copy(update={"name": "NVIDIA H100 80GB HBM3"}),
            "testbed_key": "h100-580.95-cuda",
            "testbed": {"device": "NVIDIA H100 80GB HBM3", "driver": "580.95", "mode": "cuda"},
        }
    )
    return doc.model_copy(update={"environment": env})


def write_kernel_fixtures(directory: Path) -> list[Path]:
    """The two pairs of sides the tests read (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    disturbed = [SLOW, SLOW] + [1.0] * (ROUNDS - 2)
    docs = {
        "identical-base": _side(
            "h100-identical-base",
            case_factors=disturbed,
            kernel=kernel_durations(
                KERNEL_US, rounds=ROUNDS, iters=1, seed_text="identical-base", pinned={(0, 0): 1.0}
            ),
            day=0,
        ),
        "identical-head": _side(
            "h100-identical-head",
            case_factors=disturbed,
            kernel=kernel_durations(
                KERNEL_US, rounds=ROUNDS, iters=1, seed_text="identical-head", pinned={(0, 0): SLOW}
            ),
            day=0,
        ),
        "4pct-base": _side(
            "h100-4pct-base",
            case_factors=[1.0] * ROUNDS,
            kernel=kernel_durations(KERNEL_US, rounds=ROUNDS, seed_text="4pct-base"),
            day=1,
        ),
        "4pct-head": _side(
            "h100-4pct-head",
            case_factors=[1.035] * ROUNDS,
            kernel=kernel_durations(KERNEL_US * 1.04, rounds=ROUNDS, seed_text="4pct-head"),
            day=1,
        ),
    }
    paths = []
    for name, doc in docs.items():
        path = directory / f"h100-decode-{name}.json"
        path.write_text(doc.to_json() + "\n")
        paths.append(path)
    return paths


def _sides(name: str) -> tuple[ResultDocument, ResultDocument]:
    return load_result(DATA / f"h100-decode-{name}-base.json"), load_result(DATA / f"h100-decode-{name}-head.json")


def _paired(base: ResultDocument, head: ResultDocument, stopped_by: str) -> PairedDocument:
    """The paired document of two sides' rounds: pair i is round i of each side, in ABBA order."""
    b, h = base.cases[0].latency_us, head.cases[0].latency_us
    assert b is not None and h is not None
    pairs = [
        Pair(
            order="AB" if i % 4 in (0, 3) else "BA",
            base_us=bu,
            head_us=hu,
            base_samples=25,
            head_samples=25,
        )
        for i, (bu, hu) in enumerate(zip(round_medians(b) or [], round_medians(h) or [], strict=True))
    ]
    return PairedDocument(
        mode="cuda",
        base_run=base.run.id,
        head_run=head.run.id,
        rule=PairedRule(
            min_effect=RULE.min_effect,
            alpha=RULE.alpha,
            min_pairs=RULE.min_pairs,
            max_pairs=RULE.max_pairs,
            looks=RULE.looks,
            trim=RULE.trim,
            samples_per_round="25 per round",
        ),
        cases=[PairedCase(case=CASE, min_effect=RULE.min_effect, stopped_by=stopped_by, pairs=pairs)],  # type: ignore[arg-type]
    )


def _timing(doc: ComparisonDocument) -> Finding:
    (found,) = [f for f in doc.findings if f.case == CASE and f.metric in ("latency", "bandwidth", "throughput")]
    return found


def _as_older(doc: ResultDocument) -> ResultDocument:
    """``doc`` as a profile that traced its first round only recorded it: each kernel's duration the first round's
    traced iterations, no samples."""
    data = json.loads(doc.to_json())
    for case in data["cases"]:
        for k in case["kernels"]:
            d = k["duration_us"]
            first = d["samples"][: d["round_samples"][0]]
            k["duration_us"] = {"median": float(np.median(first)), "p25": min(first), "p75": max(first)}
    return parse_result(data)


def _with_kernel(doc: ResultDocument, stats: DurationStats) -> ResultDocument:
    case = doc.cases[0]
    kernel = case.kernels[0].model_copy(update={"duration_us": stats})
    return doc.model_copy(update={"cases": [case.model_copy(update={"kernels": [kernel]})]})


def test_the_committed_fixtures_are_what_the_writer_writes(tmp_path: Path) -> None:
    for path in write_kernel_fixtures(tmp_path):
        assert path.read_text() == (DATA / path.name).read_text(), path.name


def test_identical_trees_with_one_slow_traced_iteration_name_no_kernel() -> None:
    base, head = _sides("identical")
    b, h = base.cases[0].kernels[0].duration_us, head.cases[0].kernels[0].duration_us
    assert b.samples is not None and h.samples is not None
    # what the first round alone read: the kernel line an older profile made, 171.4 us -> 204.0 us (+19.0%)
    assert (b.samples[0], h.samples[0]) == (171.4, 203.966)
    paired = compare_paired(base, head, _paired(base, head, "same"))
    history = compare([base], head)
    for doc in (paired, history):
        finding = _timing(doc)
        assert finding.kernels == [], finding.kernels
        assert "kernel " not in render_table(doc)


def test_rounds_that_disagree_name_no_kernel_even_where_the_pooled_medians_differ() -> None:
    base, head = _sides("identical")
    # half the head's traced rounds disturbed: its pooled median lies between the two levels, 9% above the base's
    halves = kernel_durations(
        KERNEL_US, rounds=ROUNDS, iters=1, seed_text="halves", pinned={(r, 0): SLOW for r in range(4)}
    )
    head = _with_kernel(head, halves)
    moved = halves.median / base.cases[0].kernels[0].duration_us.median - 1
    assert moved > 0.08
    assert halves.ci_low is not None and halves.ci_high is not None
    assert halves.ci_low < KERNEL_US * 1.01 and halves.ci_high > KERNEL_US * 1.18, "the interval spans both levels"
    finding = _timing(compare_paired(base, head, _paired(base, head, "same")))
    assert finding.kernels == []


def test_a_real_kernel_change_of_four_percent_is_named_with_its_interval() -> None:
    base, head = _sides("4pct")
    doc = compare_paired(base, head, _paired(base, head, "slower"))
    finding = _timing(doc)
    assert finding.status == "regressed"
    (move,) = finding.kernels
    assert move.key == kernel_key(KERNEL) and move.change == pytest.approx(0.04, abs=0.004)
    assert move.ci is not None and move.ci.level == 0.95
    assert 0.03 < move.ci.low < move.change < move.ci.high < 0.05
    line = next(line for line in render_table(doc).splitlines() if line.strip().startswith("kernel "))
    assert re.search(r"171\.4 us -> 178\.\d us \(\+4\.\d% \[\+[34]\.\d%, \+4\.\d%\]\)$", line), line
    # the same in the stored-history comparison, the base as the one baseline run
    (again,) = _timing(compare([base], head)).kernels
    assert again.ci == move.ci and again.change == move.change


def test_older_documents_name_a_kernel_only_past_twice_the_case_spread() -> None:
    # The identical trees as an older profile recorded them: the head's kernel read +19% from its first round,
    # which the case's own rounds show was disturbed by as much: no kernel line.
    base, head = (_as_older(d) for d in _sides("identical"))
    assert head.cases[0].kernels[0].duration_us.median / base.cases[0].kernels[0].duration_us.median - 1 > 0.18
    spread = case_spread([base.cases[0], head.cases[0]])
    assert spread > 0.18
    for doc in (compare_paired(base, head, _paired(base, head, "same")), compare([base], head)):
        assert _timing(doc).kernels == []
    # A change well past the case's spread is still named, without an interval: 4% against rounds within 1%.
    base, head = (_as_older(d) for d in _sides("4pct"))
    assert SPREAD_FACTOR * case_spread([base.cases[0], head.cases[0]]) < 0.04
    (move,) = _timing(compare_paired(base, head, _paired(base, head, "slower"))).kernels
    assert move.ci is None and move.change == pytest.approx(0.04, abs=0.01)
    # One side older, one current: the older side's one round decides, as if both were older.
    new_base, new_head = _sides("identical")
    assert _timing(compare([_as_older(new_base)], new_head)).kernels == []
    assert _timing(compare([new_base], _as_older(new_head))).kernels == []


def test_the_pr_comment_shows_the_kernel_change_with_its_interval() -> None:
    base, head = _sides("4pct")
    doc = compare_paired(base, head, _paired(base, head, "slower"))
    (move,) = _timing(doc).kernels
    assert move.ci is not None
    inp = CommentInput(
        project="p",
        job_id="j",
        status="done",
        suite_name="decode",
        testbed="h100",
        branch="f",
        commit="c" * 12,
        public_url="https://perf.example",
        pr=7,
        comparison=doc,
        candidate=head,
        baseline=base,
    )
    text = render(inp)
    interval = f"[{move.ci.low * 100:+.1f}%, {move.ci.high * 100:+.1f}%]"
    assert "| Kernel | Phase | Baseline | Candidate | Δ (95% interval) |" in text
    row = next(line for line in text.splitlines() if line.startswith(f"| `{kernel_key(KERNEL)}`"))
    assert f"| {move.change * 100:+.1f}% {interval} |" in row
    lead = next(line for line in text.splitlines() if line.startswith(f"- `{CASE}`"))
    assert f"({move.change * 100:+.1f}% {interval})" in lead
    # identical trees: no kernel table claims a change
    base, head = _sides("identical")
    same = compare_paired(base, head, _paired(base, head, "same"))
    assert "| Δ (95% interval) |" not in render(
        CommentInput(**{**inp.__dict__, "comparison": same, "candidate": head, "baseline": base})
    )


def test_kernel_samples_load_and_older_documents_load_without_them() -> None:
    schema = jsonschema.Draft202012Validator(result_json_schema())
    for path in sorted(DATA.glob("*.json")):
        schema.validate(json.loads(path.read_text()))
    base, _ = _sides("4pct")
    stats = base.cases[0].kernels[0].duration_us
    assert stats.samples is not None and stats.round_samples == [3] * ROUNDS
    assert stats.ci_low is not None and stats.ci_high is not None
    assert stats.ci_low <= stats.median <= stats.ci_high
    older = load_result(Path(__file__).resolve().parents[1] / "data" / "service" / "cpu-run-1.json")
    assert all(k.duration_us.samples is None and k.duration_us.ci_low is None for c in older.cases for k in c.kernels)
    with pytest.raises(ValueError, match="each sample belongs to exactly one round"):
        DurationStats(median=1.0, p25=1.0, p75=1.0, samples=[1.0, 1.0], round_samples=[1])
    with pytest.raises(ValueError, match="come together"):
        DurationStats(median=1.0, p25=1.0, p75=1.0, ci_low=0.9)


def test_the_intervals_need_two_rounds_and_are_the_same_every_time() -> None:
    one = [np.array([171.0, 171.5, 204.0])]
    assert median_interval(one, "k") is None
    assert change_interval(one, one, "k") is None
    rounds = [np.array([171.0 + i * 0.1, 171.2, 171.4]) for i in range(5)]
    low, high = median_interval(rounds, "k") or (0.0, 0.0)
    assert low <= float(np.median(np.concatenate(rounds))) <= high
    assert change_interval(rounds, rounds, "k") == change_interval(rounds, rounds, "k")
    stats = DurationStats(median=1.0, p25=1.0, p75=1.0, samples=[1.0, 2.0, 3.0], round_samples=[1, 2])
    assert [list(r) for r in rounds_of(stats) or []] == [[1.0], [2.0, 3.0]]


def test_kernels_of_one_key_are_summed_iteration_by_iteration() -> None:
    # Two launches with one key in one phase (a split-KV step and its combine under one name) add up per iteration
    # before the interval is taken.
    def kernel(name: str, us: float, seed: str, factor: float = 1.0) -> Kernel:
        return Kernel(
            name=name,
            key="k",
            phase="fused_attention",
            launches_per_iter=1,
            duration_us=kernel_durations(us * factor, rounds=ROUNDS, seed_text=seed),
        )

    base = [kernel("k_a", 100.0, "a"), kernel("k_b", 50.0, "b")]
    head = [kernel("k_a", 100.0, "a2", 1.06), kernel("k_b", 50.0, "b2", 1.06)]
    (move,) = kernel_moves([base], head, case_us=160.0)
    assert move.baseline_us == pytest.approx(150.0, rel=0.005) and move.change == pytest.approx(0.06, abs=0.005)
    assert move.ci is not None and move.ci.low > 0.04


def test_a_kernel_of_one_round_only_is_not_claimed_as_appeared_or_vanished() -> None:
    # A kernel in the first round's table that ran in under half of the traced iterations (a one-off of that
    # round's build) has a pooled median of 0: it is not a kernel the change added or removed.
    steady = Kernel(
        name="k",
        key="k",
        phase="fused_attention",
        launches_per_iter=1,
        duration_us=kernel_durations(100.0, rounds=5, seed_text="k"),
    )
    once = kernel_durations(20.0, rounds=5, seed_text="once")
    samples = (once.samples or [])[:3] + [0.0] * 12
    stats = DurationStats(median=0.0, p25=0.0, p75=0.0, samples=samples, round_samples=[3] * 5)
    extra = Kernel(name="tanh", key="tanh", phase="other", launches_per_iter=1, duration_us=stats)
    assert kernel_moves([[steady]], [steady, extra], case_us=110.0) == []
    assert kernel_moves([[steady, extra]], [steady], case_us=110.0) == []
    # read from one round (an older document), the same kernel is named: nothing says it was a one-off
    older = extra.model_copy(update={"duration_us": DurationStats(median=20.0, p25=20.0, p75=20.0)})
    (move,) = kernel_moves([[steady]], [steady, older], case_us=110.0)
    assert move.appeared
