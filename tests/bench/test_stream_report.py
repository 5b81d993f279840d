"""The level a process shares against the stream and the host's CPUs: the pure parts of
`bench/h200_stream_report.py` on synthetic processes, and what it reads from the committed data
(`bench/reports/data/h200-stream-2026-12-03`)."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from attnprof.core.documents import load_result
from bench.h200_rounds_report import SHARED, Process, _rounds, heavy, load_runs, load_variants
from bench.h200_stream_report import (
    CO_MOVEMENT,
    CoMove,
    addresses_new,
    adopt_section,
    blocks_drawn,
    case_rounds,
    changed,
    co_movement,
    deciding_lease,
    level_shifts,
    load_placed,
    mean_gap_p,
    moving_together,
    one_stream_section,
    render,
    round_stream_section,
    sd_ratio_interval,
    shared_levels,
    shared_sd,
    shifted_cases,
    variance_ratio_p,
)
from tests.core.result_documents import make_case
from tests.profiling_support import REPO

DATA = REPO / "bench" / "reports" / "data" / "h200-stream-2026-12-03"
BEFORE = REPO / "bench" / "reports" / "data" / "h200-rounds-2026-12-03"
PLACED = [
    REPO / "bench" / "reports" / "data" / "h200-placement-2026-12-03" / "validation",
    REPO / "bench" / "reports" / "data" / "h200-spread-causes-2026-12-03" / "redraw",
]


def _process(name: str, level: float, jitter: float = 0.0) -> Process:
    """A process whose SHARED cases sit ``level`` (relative) off 100 µs, spread around it by ``jitter``."""
    cases = {i: make_case(i, median_us=100.0 * (1.0 + level + jitter * (k - 1.5)), n=30) for k, i in enumerate(SHARED)}
    return Process(name, cases, {})


def test_a_shared_level_is_read_as_the_median_offset_of_the_shared_cases() -> None:
    processes = [_process(f"p{k}", level, jitter=0.001) for k, level in enumerate([-0.004, 0.0, 0.004])]
    levels = shared_levels(processes)
    assert levels == pytest.approx([-0.004, 0.0, 0.004], abs=2e-4)
    assert shared_sd(processes) == pytest.approx(0.004, rel=0.05)


def test_the_variance_test_tells_a_narrower_spread_and_ignores_a_difference_in_level() -> None:
    wide = [-0.004, 0.004, -0.003, 0.003, -0.0035, 0.0035, 0.0, -0.002, 0.002, 0.001, -0.001, 0.0025]
    narrow = [x / 6 for x in wide]
    hits, p = variance_ratio_p(wide, narrow)
    assert p < 0.01 and hits < 100
    # a shift between the groups is not spread: the narrow group moved by 1% gives the very same answer
    assert variance_ratio_p(wide, [x + 0.01 for x in narrow]) == (hits, p)
    # nor with the same spread about another level
    shifted = [x + 0.02 for x in wide[::-1]]
    assert variance_ratio_p(wide, shifted)[1] > 0.2
    # narrower the other way round: no evidence that the second varies less
    assert variance_ratio_p(narrow, wide)[1] > 0.9


def test_a_gap_in_means_is_tested_both_ways() -> None:
    a = [-0.002, 0.001, 0.0, 0.002, -0.001, 0.0015]
    gap, p = mean_gap_p(a, [x + 0.01 for x in a])
    assert gap == pytest.approx(0.01) and p < 0.01
    assert mean_gap_p(a, [x - 0.01 for x in a])[1] == p
    assert mean_gap_p(a, a[::-1])[1] > 0.9


def test_section_4_says_narrowed_only_when_the_test_does_and_names_a_shift_only_when_it_is_one() -> None:
    wide = [-0.004, 0.004, -0.003, 0.003, -0.0035, 0.0035, 0.0, -0.002, 0.002, 0.001, -0.001, 0.0025]
    reuse = [_process(f"r{k}", x, jitter=0.0002) for k, x in enumerate(wide)]
    narrow = [_process(f"n{k}", x / 6, jitter=0.0002) for k, x in enumerate(wide[::-1])]
    stream = [x / 8 for x in wide]
    text = "\n".join(one_stream_section({"reuse": reuse, "one-stream": narrow}, stream))
    assert "One non-default stream for the whole process narrowed the shared level." in text
    assert "no shift is shown" in text
    same = [_process(f"s{k}", x, jitter=0.0002) for k, x in enumerate(wide[::-1])]
    text = "\n".join(one_stream_section({"reuse": reuse, "one-stream": same}, stream))
    assert "was not shown to narrow it" in text and "is narrower than `one-stream`'s" in text
    slow = [_process(f"f{k}", 0.01 + x / 6, jitter=0.0002) for k, x in enumerate(wide[::-1])]
    text = "\n".join(one_stream_section({"reuse": reuse, "one-stream": slow}, stream))
    assert "no shift is shown" not in text and "narrowed the shared level" in text


def test_cases_that_changed_are_those_that_moved_more_than_the_margin() -> None:
    old = {"a": 1.0, "b": 0.1, "c": 0.5, "d": 0.9}
    new = {"a": 0.2, "b": 0.9, "c": 0.6, "d": 0.5}
    assert changed(old, new) == (["b"], ["a", "d"])
    assert changed(old, old) == ([], [])


def test_processes_are_read_by_whole_label_in_the_order_they_ran() -> None:
    found = load_variants(DATA / "pin")
    assert {k: len(v) for k, v in found.items()} == {"pin-lo": 9, "pin-hi": 9, "reuse": 9}
    assert all(p.name.startswith(f"{label}-") for label, ps in found.items() for p in ps)
    for ps in found.values():
        started = [load_result(DATA / "pin" / f"{p.name}.json.gz").run.created_at for p in ps]
        assert started == sorted(started)


def test_the_committed_data_holds_what_the_report_says() -> None:
    leases = json.loads((DATA / "provenance.json").read_text())["leases"]
    first, second, third = (leases[k]["gpu"].removeprefix("GPU-") for k in ("pin, stream", "runs", "one-stream"))
    for name in ("pin", "stream"):
        assert {load_result(f).environment.device.uuid for f in (DATA / name).glob("*.json.gz")} == {first}
    variants = load_variants(DATA / "stream")
    assert {k: len(v) for k, v in variants.items()} == {"stream": 13, "reuse": 13}
    assert all(set(SHARED) <= set(p.cases) for ps in variants.values() for p in ps)
    runs = load_runs(DATA / "runs")
    assert len(runs) == 9 and len(heavy(runs)) == 29
    assert {d.environment.device.uuid for p in runs for d in p.documents} == {second}
    assert {load_result(f).environment.device.uuid for f in (DATA / "one-stream").glob("*.json.gz")} == {third}
    one = load_variants(DATA / "one-stream")
    assert {k: len(v) for k, v in one.items()} == {"one-stream": 6, "reuse": 6}
    assert all(set(SHARED) <= set(p.cases) for ps in one.values() for p in ps)
    for lease, n in (("a", 22), ("b", 9)):
        folder = DATA / "round-stream" / lease
        gpu = leases[f"round-stream {lease}"]["gpu"].removeprefix("GPU-")
        documents = [f for f in folder.glob("*.json.gz") if not f.name.endswith(".addresses.json.gz")]
        assert len(documents) == 3 * n and {load_result(f).environment.device.uuid for f in documents} == {gpu}
        found = load_variants(folder)
        assert {k: len(v) for k, v in found.items()} == {"reuse": n, "round-stream": n, "stream": n}
        for p in (q for ps in found.values() for q in ps):
            record = load_placed(folder, p.name)
            order = [e["case"] for e in record]
            assert order == order[:6] * 10 and set(order) == set(p.cases)  # six cases in suite order, ten rounds
            assert all(len(_rounds(p.cases[i])) == 10 for i in p.cases)


def test_the_report_regenerates_from_its_data() -> None:
    text, variants, by_lease, adopt = render(DATA, BEFORE, "h200-stream.png", PLACED)
    assert text == (REPO / "bench" / "reports" / "h200-stream.md").read_text()
    assert sorted(by_lease) == ["a", "b"]
    # section 6: the lease that decides has ten processes of each over both suites; the later GPUs' are shown apart
    assert {k: (len(v["reuse"]), len(v["stream"])) for k, v in adopt.items()} == {
        "a": (10, 10),
        "b": (4, 4),
        "c": (1, 1),
    }
    assert deciding_lease(adopt) == "a" and all(len(p.cases) == 45 for v in adopt["a"].values() for p in v)
    assert "| reuse | 10 | 18.5/29 |" in text and "| stream | 10 | 22.9/29 |" in text
    assert "Verdict: take up `stream`." in text and "**Verdict:** take up a stream per case-round." in text
    assert "In every lease both a stream per case-round and a stream per round of the suite narrowed" in text
    assert "| stream per round (785d8bc) | 9 | 19/29 |" in text
    assert "## 4. One non-default stream for the whole process" in text and "p = 0.234" in text
    assert shared_sd(variants["reuse"]) > 3 * shared_sd(variants["stream"])


def _round_process(name: str, rounds: dict[str, list[float]], per_round: int = 5) -> Process:
    """A process whose cases took ``per_round`` samples at each of their round values, in order."""
    cases = {}
    for case_id, values in rounds.items():
        case = make_case(case_id, samples=[v for v in values for _ in range(per_round)])
        assert case.latency_us is not None
        latency = case.latency_us.model_copy(update={"round_samples": [per_round] * len(values)})
        cases[case_id] = case.model_copy(update={"latency_us": latency})
    return Process(name, cases, {})


Blocks = list[list[int]]  # one case-round's [address, bytes] pairs


def _placed(cases: list[str], streams: list[list[int]], blocks: list[list[Blocks]] | None = None) -> list[Any]:
    """An --addresses record: round by round, each case's stream (``streams[round][k]``) and blocks (by default one
    block of its own)."""
    return [
        {"case": c, "stream": streams[r][k], "blocks": blocks[r][k] if blocks else [[1000 * r + k, 64]]}
        for r in range(len(streams))
        for k, c in enumerate(cases)
    ]


def test_a_case_round_is_the_cases_nth_build() -> None:
    placed = _placed(["x", "y"], [[7, 7], [8, 9]])
    runs = case_rounds(placed)
    assert runs[("x", 0)]["stream"] == 7 and runs[("y", 1)]["stream"] == 9 and len(runs) == 4


def _stream_levels(streams: list[list[int]], seed: int) -> tuple[list[Process], dict[str, list[Any]]]:
    """Six processes of four cases, ten rounds, each case-round on ``streams[round][case]``: each stream its own
    level, drawn per process, plus a little noise."""
    rng = random.Random(seed)
    cases = ["a", "b", "c", "d"]
    processes, placed = [], {}
    for k in range(6):
        level = {s: rng.gauss(0.0, 0.004) for s in {s for row in streams for s in row}}
        rounds = {
            c: [100.0 * (1 + level[streams[r][i]] + rng.gauss(0.0, 0.0005)) for r in range(10)]
            for i, c in enumerate(cases)
        }
        processes.append(_round_process(f"s-{k}", rounds))
        placed[f"s-{k}"] = _placed(cases, streams)
    return processes, placed


def test_rounds_that_share_a_streams_level_move_together_and_others_do_not() -> None:
    # eight streams in turn, each case-round on its own: a stream comes back in other rounds, never within one
    processes, placed = _stream_levels([[(3 * r + i) % 8 for i in range(4)] for r in range(10)], seed=5)
    found = co_movement(processes, placed, cases=("a", "b", "c", "d"), resamples=400)
    assert set(found) == set(CO_MOVEMENT) - {"same round, same stream"}
    assert found["same stream, other round"].r > 0.8 and found["same stream, other round"].low > 0.5
    assert found["same round, other stream"].low < 0 < found["same round, other stream"].high
    # per process: 40 case-rounds, 6 pairs of cases x 10 x 10 rounds = 600 pairs of different cases, 60 of one round
    assert sum(c.pairs for c in found.values()) == 6 * 600
    assert found["same stream, other round"].pairs + found["neither"].pairs == 6 * 540
    assert found["same stream, other round"].shared_blocks == 0.0  # each case-round had a block of its own
    # a stream per round shared by its cases: rounds of one round move together, the rest do not
    processes, placed = _stream_levels([[r] * 4 for r in range(10)], seed=6)
    found = co_movement(processes, placed, cases=("a", "b", "c", "d"), resamples=400)
    assert set(found) == {"same round, same stream", "neither"}
    assert found["same round, same stream"].r > 0.8 and found["same round, same stream"].pairs == 6 * 60
    assert found["neither"].r < 0.1


def test_blocks_drawn_and_addresses_new_count_what_the_allocator_handed_out() -> None:
    same = _placed(["x"], [[0]] * 4, [[[[10, 64], [20, 64]]]] * 4)
    assert blocks_drawn(same) == 0.0 and addresses_new(same) == pytest.approx(0.25)  # the first round's are new
    fresh = _placed(["x"], [[r] for r in range(4)])
    assert blocks_drawn(fresh) == 1.0 and addresses_new(fresh) == 1.0
    # the same addresses at another size are other blocks, but not new addresses
    resized = _placed(["x"], [[0], [0]], [[[[10, 64]]], [[[10, 128]]]])
    assert blocks_drawn(resized) == 1.0 and addresses_new(resized) == 0.5
    # one round of four on blocks of its own
    once = _placed(["x"], [[0]] * 4, [[[[10, 64]]], [[[10, 64]]], [[[30, 64]]], [[[10, 64]]]])
    assert blocks_drawn(once) == pytest.approx(1 / 3)


def test_pairs_move_together_where_their_interval_lies_above_zero() -> None:
    up, flat = CoMove(100, 0.3, 0.1, 0.5, 0.0), CoMove(100, 0.05, -0.1, 0.2, 0.0)
    assert moving_together([("a", up), ("b", up)]) == "move together"
    assert moving_together([("a", up), ("b", flat)]) == "move together in lease a only"
    assert moving_together([("a", flat), ("b", flat)]) == "were not shown to move together"


def test_an_addresses_record_is_read_gzipped_or_not_and_is_not_a_document(tmp_path: Path) -> None:
    record = _placed(["x"], [[1], [2]])
    (tmp_path / "stream-11.addresses.json").write_text(json.dumps(record))
    with gzip.open(tmp_path / "stream-12.addresses.json.gz", "wt") as f:
        json.dump(record, f)
    assert load_placed(tmp_path, "stream-11") == record == load_placed(tmp_path, "stream-12")
    assert load_variants(tmp_path) == {}


PIDS = itertools.count(1000)


def _lease(levels: dict[str, list[float]]) -> tuple[dict[str, list[Process]], dict[str, list[Any]]]:
    """Processes by variant whose SHARED cases and one forward case sit at the given levels, each with a record."""
    variants: dict[str, list[Process]] = {}
    placed = {}
    for v, values in levels.items():
        for level in values:
            name = f"{v}-{next(PIDS)}"  # a process's shared level is keyed by its pid: unique, as on one host
            rounds = {
                i: [100.0 * (1 + level + 0.0003 * ((r + j) % 3 - 1)) for r in range(10)]
                for j, i in enumerate((*SHARED, "fwd"))
            }
            variants.setdefault(v, []).append(_round_process(name, rounds))
            per_round = [[r] * 5 for r in range(10)]  # round-stream: one stream a round
            streams = (
                [[0] * 5] * 10
                if v == "reuse"
                else [[5 * r + j for j in range(5)] for r in range(10)]
                if v == "stream"
                else per_round
            )
            placed[name] = _placed([*SHARED, "fwd"], streams)
    return variants, placed


WIDE = [-0.004, 0.004, -0.003, 0.003, -0.0035, 0.0035, 0.0, -0.002, 0.002, 0.001, -0.001, 0.0025]
NARROW = [x / 6 for x in WIDE[::-1]]
GPUS = {"a": "GPU-a", "b": "GPU-b"}


def _section(leases: dict[str, dict[str, list[float]]], contrast: dict[str, list[float]]) -> str:
    built = {n: _lease(levels) for n, levels in leases.items()}
    return "\n".join(
        round_stream_section(
            {n: b[0] for n, b in built.items()},
            {n: b[1] for n, b in built.items()},
            GPUS,
            {"here": _lease(contrast)[0]} if contrast else {},
        )
    )


def test_section_5_says_narrowed_only_where_every_lease_shows_it() -> None:
    same_blocks = {"reuse": WIDE, "redraw": WIDE[::-1]}
    text = _section({"a": {"reuse": WIDE, "round-stream": NARROW, "stream": NARROW}}, same_blocks)
    assert "In every lease both a stream per case-round and a stream per round of the suite narrowed" in text
    assert "Blocks drawn anew on the one stream were not shown to narrow it" in text
    assert "was not shown narrower than a stream per round of the suite in any lease" in text
    assert "Two more leases" not in text and "One more lease (a: `GPU-a`" in text
    two = {
        "a": {"reuse": WIDE, "round-stream": NARROW, "stream": NARROW},
        "b": {"reuse": WIDE, "round-stream": WIDE[::-1], "stream": [x / 4 for x in NARROW]},
    }
    text = _section(two, same_blocks)
    assert "In every lease a stream per case-round narrowed the shared level; a stream per round of the suite" in text
    assert "Two more leases, each on its own GPU" in text and "narrower still in lease b" in text
    only_round = {"a": {"reuse": WIDE, "round-stream": NARROW, "stream": [1.2 * x for x in WIDE[::-1]]}}
    text = _section(only_round, same_blocks)
    assert "In every lease a stream per round of the suite narrowed the shared level; a stream per case-round" in text
    assert "standard deviation was larger with a stream per case-round in at least one lease" in text
    neither = {"a": {"reuse": WIDE, "round-stream": WIDE[::-1], "stream": WIDE[::-1]}}
    text = _section(neither, same_blocks)
    assert "A new stream per round did not narrow the shared level in every lease." in text
    assert "not shown to narrow it" not in text  # nothing to set the blocks against
    text = _section({"b": {"reuse": WIDE, "round-stream": NARROW, "stream": NARROW}}, {"reuse": WIDE, "x": NARROW})
    assert "Blocks drawn anew on the one stream narrowed it too (`x`)" in text


def test_section_5_reads_the_forward_cases_level_and_the_slowest_process() -> None:
    text = _section({"a": {"reuse": WIDE, "round-stream": NARROW, "stream": [0.002 + x for x in NARROW]}}, {})
    assert "standard deviation was no larger with a stream per case-round in any lease" in text
    gap = (0.002 + statistics.fmean(NARROW) - statistics.fmean(WIDE)) / (1 + statistics.fmean(WIDE))
    assert f"their means move by fwd {gap * 100:+.2f}% in lease a (p = 0.0" in text  # +0.18%, p < 0.05
    slowest = max(0.002 + x for x in NARROW) - statistics.median(WIDE)
    assert f"the slowest `stream` process reads them {slowest * 100:+.2f}% (lease a)" in text


def test_two_processes_of_one_pid_are_refused_a_shared_level() -> None:
    with pytest.raises(ValueError, match="share a pid"):
        shared_levels([_process("reuse-7", 0.001), _process("stream-7", 0.002)])


def test_the_sd_ratio_interval_brackets_the_ratio() -> None:
    ratio, low, high = sd_ratio_interval(WIDE, NARROW, resamples=500)
    assert ratio == pytest.approx(1 / 6) and low < ratio < high < 1


def test_section_5_without_forward_cases_or_a_deciding_contrast_still_states_the_rule() -> None:
    built = _lease({"reuse": WIDE, "round-stream": NARROW, "stream": NARROW})
    shared_only = {v: [Process(q.name, {i: q.cases[i] for i in SHARED}, {}) for q in ps] for v, ps in built[0].items()}
    few = _lease({"reuse": WIDE[:3], "x": WIDE[4:7]})[0]  # three a side: an interval reaching 0
    same_gpu = {"a": "GPU-a", "b": "GPU-a"}
    text = "\n".join(
        round_stream_section(
            {"a": shared_only, "b": shared_only}, {"a": built[1], "b": built[1]}, same_gpu, {"here": few}
        )
    )
    assert "The runner stayed on the process's stream until one lease compared" in text
    assert "forward cases'" not in text and "each on its own GPU" not in text and "Two more leases (" in text
    assert "nor do their intervals exclude a narrowing as large as a new stream's here" in text


def _adopt_group(prefix: str, scale: float, n: int = 10, shift: int = 0, level: float = 0.0) -> list[Process]:
    """``n`` processes over three cases of 200 µs and more and one of 20 µs, each process's medians at ``scale``
    times its own offset (up to +-0.4%), each case in its own order, all moved by ``level``."""
    half = max((n - 1) / 2, 1.0)
    offsets = [(k - (n - 1) / 2) / half * 0.004 for k in range(n)]
    out = []
    for k in range(n):
        cases = {
            c: make_case(c, median_us=base * (1 + level) * (1 + scale * offsets[(k + shift + 3 * j) % n]), n=30)
            for j, (c, base) in enumerate((("v/a", 200.0), ("v/b", 400.0), ("v/c", 800.0), ("v/short", 20.0)))
        }
        out.append(Process(f"{prefix}-{k}", cases, {}))
    return out


def test_section_6_takes_up_a_narrower_stream_and_names_the_lease_and_the_others() -> None:
    leases = {
        "a": {"reuse": _adopt_group("r", 1.0), "stream": _adopt_group("s", 0.3, shift=1)},
        "b": {"reuse": _adopt_group("rb", 1.0, n=4), "stream": _adopt_group("sb", 0.5, n=4, shift=1)},
        "c": {"reuse": _adopt_group("rc", 1.0, n=1), "stream": _adopt_group("sc", 1.0, n=1)},
    }
    gpus = {k: f"GPU-{k * 8}-rest" for k in leases}
    text = "\n".join(adopt_section(leases, gpus))
    assert "**Lease a** (GPU aaaaaaaa)" in text and "Verdict: take up `stream`." in text
    assert "**Verdict:** take up a stream per case-round." in text
    assert "lease b (GPU bbbbbbbb, 4 processes of each): standard deviation" in text
    assert "lease c (GPU cccccccc): 1 and 1 processes, too few for a spread" in text
    assert "the 1 shorter cases" in text and "none moved more than 0.25%" in text


def test_section_6_keeps_one_stream_when_the_rule_says_so_and_names_moved_levels() -> None:
    leases = {"a": {"reuse": _adopt_group("r", 1.0), "stream": _adopt_group("s", 1.0, shift=2, level=0.004)}}
    text = "\n".join(adopt_section(leases, {"a": "GPU-12345678-rest"}))
    assert "Verdict: keep `reuse`" in text and "**Verdict:** keep the process's one stream." in text
    assert "Other GPUs" not in text
    # every case moved +0.4%: each named, and each apart by Mann-Whitney (ten processes a side, no overlap)
    assert "moved more than 0.25%: v/a +0.40%" in text and "Of all 4 cases, 4 read other medians at p < 0.05" in text


def test_section_6_refuses_to_decide_without_eight_processes_a_side() -> None:
    leases = {"a": {"reuse": _adopt_group("r", 1.0, n=7), "stream": _adopt_group("s", 0.3, n=7)}}
    assert deciding_lease(leases) is None
    assert (
        deciding_lease({**leases, "b": {"reuse": _adopt_group("r", 1.0, n=8), "stream": _adopt_group("s", 1.0, n=8)}})
        == "b"
    )
    assert (
        adopt_section(leases, {"a": "GPU-12345678"})[-2]
        == "No lease has eight processes of each: the rule cannot decide."
    )


def test_level_shifts_and_shifted_cases_read_the_groups_medians() -> None:
    kept, moved = _adopt_group("r", 1.0), _adopt_group("s", 1.0, level=0.01)
    shifts = level_shifts(kept, moved, ["v/a", "v/short"])
    assert shifts == pytest.approx({"v/a": 0.01, "v/short": 0.01}, abs=1e-4)
    assert shifted_cases(kept, moved, ["v/a", "v/b"]) == ["v/a", "v/b"]
    assert shifted_cases(kept, _adopt_group("t", 1.0, shift=3), ["v/a", "v/b"]) == []
