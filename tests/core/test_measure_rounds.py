"""Timing in rounds: each case's samples are taken in several passes over the suite, the case built again in each.

The factories below record when each of their workloads is called, so the tests can see the order in which
the runner timed the cases; the runner works on the CPU here, as in CI.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from attnprof.core.documents import Case, ResultDocument
from attnprof.core.errors import SuiteError
from attnprof.core.measure import runner
from attnprof.core.measure.case import on_stream, release_stream_workspaces, round_stream
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.measure.timing import PAIRED_TIMING_METHOD, TIMING_METHOD
from attnprof.core.suite import TimingConfig, parse_suite

MODULE = "attnprof_test_round_factories"

FACTORIES = """
import time

import torch

CALLS = []  # (case name, build number, time) per call of a workload's step
BUILDS = {}
STREAM = [None]  # the stream current now, as the tests' stand-in for CUDA's sets it
ON = []  # (case name, build number, stream) at each build and each call of a step


def _factory(name, fail_on_build=None):
    def factory(params, device):
        BUILDS[name] = BUILDS.get(name, 0) + 1
        build = BUILDS[name]
        if build == fail_on_build:
            raise RuntimeError(f"{name} cannot be built a {build}th time")
        ON.append((name, build, STREAM[0]))
        x = torch.randn(64, 64, device=device)

        def step(x):
            CALLS.append((name, build, time.perf_counter()))
            ON.append((name, build, STREAM[0]))
            return x @ x

        return {"fn": step, "args": [x]}

    return factory


first = _factory("first")
second = _factory("second")
flaky = _factory("flaky", fail_on_build=2)
"""

TIMING = """\
[suite.timing]
warmup = 1
min_samples = 9
max_samples = 30
budget_s = 0.2
trace_iters = 1
rounds = 3
"""


def suite(names: list[str], timing: str = TIMING) -> str:
    cases = "".join(f'[[cases]]\nname = "{n}"\ntarget = "{MODULE}:{n}"\n\n' for n in names)
    return f'[suite]\nname = "rounds"\n\n{timing}\n{cases}'


@pytest.fixture(scope="module")
def factories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    src = tmp_path_factory.mktemp("user-src")
    (src / f"{MODULE}.py").write_text(textwrap.dedent(FACTORIES))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(src))
        module = __import__(MODULE)
        yield module
    sys.modules.pop(MODULE, None)


def profile(factories: object, text: str, peaks_cache: Path) -> ResultDocument:
    factories.CALLS.clear()  # type: ignore[attr-defined]
    factories.BUILDS.clear()  # type: ignore[attr-defined]
    factories.ON.clear()  # type: ignore[attr-defined]
    return profile_suite(parse_suite(text, source="rounds.toml"), ProfileOptions(device="cpu", cache_dir=peaks_cache))


def case(doc: ResultDocument, case_id: str) -> Case:
    found = doc.case(case_id)
    assert found is not None
    return found


def test_each_case_is_built_and_timed_once_per_round_its_rounds_interleaved(
    factories: object, peaks_cache: Path
) -> None:
    doc = profile(factories, suite(["first", "second"]), peaks_cache)
    calls = factories.CALLS  # type: ignore[attr-defined]
    assert factories.BUILDS == {"first": 3, "second": 3}  # type: ignore[attr-defined]
    # In time order the builds go first 1, second 1, first 2, second 2, first 3, second 3.
    order = [(name, build) for name, build, _ in calls]
    runs = [key for i, key in enumerate(order) if i == 0 or order[i - 1] != key]
    assert runs == [("first", 1), ("second", 1), ("first", 2), ("second", 2), ("first", 3), ("second", 3)]
    for name in ("first", "second"):
        c = case(doc, name)
        assert c.status == "ok", c.error
        assert c.latency_us is not None and c.latency_us.rounds == 3
        # each round times at least its share of min_samples (9 / 3); the samples of all rounds are pooled
        assert len(c.latency_us.samples) >= 9
        assert c.latency_us.median == pytest.approx(statistics.median(c.latency_us.samples), abs=1e-3)
        assert c.latency_us.min == pytest.approx(min(c.latency_us.samples), abs=1e-3)
        # the document says which samples came from which round: one count per round, in time order, each a
        # share of at least min_samples / rounds, and no more than the calls that round's build received
        sizes = c.latency_us.round_samples
        assert sizes is not None and len(sizes) == 3 and sum(sizes) == len(c.latency_us.samples)
        calls_per_build = [sum(1 for n, b, _ in calls if n == name and b == build) for build in (1, 2, 3)]
        assert all(3 <= size <= got for size, got in zip(sizes, calls_per_build, strict=True))


def test_one_round_times_each_case_in_one_stretch(factories: object, peaks_cache: Path) -> None:
    doc = profile(factories, suite(["first", "second"], TIMING.replace("rounds = 3", "rounds = 1")), peaks_cache)
    assert factories.BUILDS == {"first": 1, "second": 1}  # type: ignore[attr-defined]
    latency = case(doc, "first").latency_us
    assert latency is not None and latency.rounds == 1


def test_each_case_round_is_built_warmed_up_and_timed_on_a_stream_of_its_own(
    factories: object, peaks_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA streams need a GPU: a stand-in hands out numbered streams and makes one current the way
    # torch.cuda.stream does, so the test sees which stream each build and each call of a step ran on.
    handed: list[str] = []

    def next_stream(session: object, case_id: str) -> str:
        handed.append(f"stream {len(handed) + 1}")
        return handed[-1]

    @contextlib.contextmanager
    def current(stream: str | None) -> Iterator[None]:
        before = factories.STREAM[0]  # type: ignore[attr-defined]
        factories.STREAM[0] = stream  # type: ignore[attr-defined]
        try:
            yield
        finally:
            factories.STREAM[0] = before  # type: ignore[attr-defined]

    monkeypatch.setattr(runner.SuiteSession, "new_round_stream", next_stream)
    monkeypatch.setattr(runner, "on_stream", current)
    doc = profile(factories, suite(["first", "second"]), peaks_cache)
    assert all(case(doc, n).status == "ok" for n in ("first", "second"))
    on = factories.ON  # type: ignore[attr-defined]
    streams: dict[tuple[str, int], set[str | None]] = {}
    for name, build, stream in on:
        streams.setdefault((name, build), set()).add(stream)
    # six case-rounds (two cases, three rounds): the build, warm-up, timing and the first round's trace of each
    # on one stream, its own, handed out in the order the rounds ran
    assert sorted(streams) == [(n, b) for n in ("first", "second") for b in (1, 2, 3)]
    assert all(len(s) == 1 for s in streams.values()), streams
    by_round = {key: next(iter(s)) for key, s in streams.items()}
    assert len(set(by_round.values())) == 6 and None not in by_round.values()
    assert [by_round[(n, b)] for b in (1, 2, 3) for n in ("first", "second")] == handed
    assert factories.STREAM == [None]  # type: ignore[attr-defined]  # every round's stream was left


class _PoolStream:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


def test_a_case_round_takes_a_pool_stream_its_case_has_not_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pool of four handed out in turn (PyTorch's holds 32), four cases taking one each round: in turn alone, each
    # case would meet one stream in every round; skipping those it has used, each round of a case is on another.
    pool = itertools.cycle(range(4))
    monkeypatch.setattr(runner, "round_stream", lambda device: _PoolStream(next(pool)))
    monkeypatch.setattr(runner, "STREAM_POOL", 4)
    session = types.SimpleNamespace(device="cuda", _round_streams={})
    rounds = [
        {case: runner.SuiteSession.new_round_stream(session, case).cuda_stream for case in "abcd"}  # type: ignore[arg-type]
        for _ in range(5)
    ]
    for case in "abcd":
        assert sorted(r[case] for r in rounds[:4]) == [0, 1, 2, 3], rounds  # four rounds, four streams
    assert all(len(set(r.values())) == 4 for r in rounds[:1])
    assert session._round_streams["a"] == {rounds[4]["a"]}  # the pool used up: the fifth round starts again
    # on the CPU there is no stream, and nothing is kept
    cpu = types.SimpleNamespace(device="cpu", _round_streams={})
    monkeypatch.setattr(runner, "round_stream", lambda device: None)
    assert runner.SuiteSession.new_round_stream(cpu, "a") is None  # type: ignore[arg-type]
    assert cpu._round_streams == {"a": set()}


def test_a_stream_per_case_round_is_cuda_s_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert round_stream("cpu") is None
    with on_stream(None):  # no stream on the CPU: nothing to make current
        pass
    # on CUDA each call takes a new stream from PyTorch (a stand-in here: no GPU), and the documents say so
    made = iter(["pool stream 1", "pool stream 2"])
    monkeypatch.setattr(torch.cuda, "Stream", lambda: next(made))
    assert [round_stream("cuda"), round_stream("cuda")] == ["pool stream 1", "pool stream 2"]
    assert TIMING_METHOD["cuda"].endswith("; a stream per case-round")
    assert PAIRED_TIMING_METHOD["cuda"].endswith("; a stream per case-round")


def test_a_case_that_fails_in_a_later_round_is_failed_with_the_round_named(
    factories: object, peaks_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    freed: list[str] = []
    monkeypatch.setattr(runner, "release_stream_workspaces", freed.append)
    doc = profile(factories, suite(["first", "flaky"]), peaks_cache)
    flaky = case(doc, "flaky")
    assert flaky.status == "failed" and flaky.error is not None
    assert flaky.error.type == "RuntimeError"
    assert flaky.error.message.startswith("in timing round 2: ")
    assert flaky.error.message.endswith("flaky cannot be built a 2th time")
    assert case(doc, "first").status == "ok"
    # the failed case is not built again in round 3; the other case still gets all three
    assert factories.BUILDS == {"first": 3, "flaky": 2}  # type: ignore[attr-defined]
    # every round that ran frees its stream's workspaces, the failed one too: first's three, flaky's two
    assert freed == ["cpu"] * 5


def test_rounds_share_the_samples_budget_and_precision() -> None:
    config = TimingConfig(min_samples=50, max_samples=2000, budget_s=1.2, target_rel_ci=0.002, rounds=3)
    one = config.round_config()
    assert (one.min_samples, one.max_samples, one.rounds) == (17, 667, 1)
    assert one.budget_s == pytest.approx(0.4)
    assert one.target_rel_ci == pytest.approx(0.002 * 3**0.5)


def test_rounds_never_leave_a_round_fewer_than_three_samples() -> None:
    assert TimingConfig(min_samples=3, max_samples=5).effective_rounds == 1
    assert TimingConfig(min_samples=7, max_samples=9, rounds=5).effective_rounds == 2
    assert TimingConfig(min_samples=7, max_samples=9, rounds=5).round_config().min_samples == 4


@pytest.mark.parametrize("value", [0, 21, 2.5, "3", True])
def test_rounds_out_of_range_is_a_suite_error_naming_the_key(value: object) -> None:
    text = suite(
        ["first"], TIMING.replace("rounds = 3", f"rounds = {value!r}".replace("'", '"').replace("True", "true"))
    )
    with pytest.raises(SuiteError) as err:
        parse_suite(text, source="rounds.toml")
    assert err.value.key == "suite.timing.rounds"
    assert "rounds" in str(err.value)


def test_each_case_round_frees_its_stream_s_cublas_workspace_once_timed(
    factories: object, peaks_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a round is timed (and, in the first, traced and checked), the workspace cuBLAS keeps for the round's
    # stream is freed: a run would otherwise hold one for every stream of the pool that it met.
    freed: list[tuple[str, int]] = []
    calls = factories.CALLS  # type: ignore[attr-defined]
    monkeypatch.setattr(runner, "release_stream_workspaces", lambda device: freed.append((device, len(calls))))
    doc = profile(factories, suite(["first", "second"]), peaks_cache)
    assert all(case(doc, n).status == "ok" for n in ("first", "second"))
    assert [device for device, _ in freed] == ["cpu"] * 6  # two cases, three rounds
    # each release comes after its round's calls and before the next round's build calls the step again
    rounds = [(name, build) for name, build, _ in calls]
    ends = [i + 1 for i in range(len(rounds)) if i + 1 == len(rounds) or rounds[i + 1] != rounds[i]]
    assert [at for _, at in freed] == ends


def test_the_workspace_release_is_cuda_s_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    cleared: list[bool] = []
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: cleared.append(True), raising=False)
    release_stream_workspaces("cpu")
    assert cleared == []
    release_stream_workspaces("cuda")  # PyTorch's own call (a stand-in here: no GPU)
    assert cleared == [True]
    monkeypatch.delattr(torch._C, "_cuda_clearCublasWorkspaces")
    release_stream_workspaces("cuda")  # a PyTorch without it: nothing to free, no error
    assert cleared == [True]
