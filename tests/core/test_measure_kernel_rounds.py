"""Every round traces its own iterations, and each kernel's duration pools all of them (on the CPU, as in CI).

The factory below builds a workload whose first build runs one more operation per step (a ``tanh`` after its matrix
product) than every later build: what the first round's trace shows is not what the case runs in its other rounds,
as a first round that fell in a disturbed stretch is not. A kernel table read from the first round's trace alone
gives the ``tanh`` its first-round time; pooled over the rounds it launched in two iterations of ten, and its median
is 0. The assertions hold whatever the host's load does to the durations themselves.
"""

from __future__ import annotations

import statistics
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnprof.core.documents import ResultDocument
from attnprof.core.measure import runner
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.measure.trace import RoundTrace
from attnprof.core.suite import parse_suite

MODULE = "attnprof_test_kernel_rounds"

FACTORY = """
import torch

BUILDS = [0]


def first_slow(params, device):
    BUILDS[0] += 1
    extra = BUILDS[0] == 1
    a = torch.randn(160, 160, device=device)

    def step(x):
        y = x @ a
        if extra:
            y = torch.tanh(y)
        return y

    return {"fn": step, "args": [torch.randn(160, 160, device=device)]}
"""

SUITE = f"""
[suite]
name = "kernel-rounds"

[suite.timing]
warmup = 1
min_samples = 15
max_samples = 30
budget_s = 0.1
trace_iters = 2
rounds = 5

[[cases]]
name = "first_slow"
target = "{MODULE}:first_slow"
"""


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    src = tmp_path_factory.mktemp("user-src")
    (src / f"{MODULE}.py").write_text(textwrap.dedent(FACTORY))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(src))
        yield __import__(MODULE)
    sys.modules.pop(MODULE, None)


def _profile(factory: object, peaks_cache: Path) -> ResultDocument:
    factory.BUILDS[0] = 0  # type: ignore[attr-defined]
    return profile_suite(
        parse_suite(SUITE, source="kernel-rounds.toml"), ProfileOptions(device="cpu", cache_dir=peaks_cache)
    )


def test_each_kernel_pools_every_rounds_traced_iterations(
    factory: object, peaks_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traced: list[int] = []
    real = runner.trace_round

    def counted(*args: object, **kw: object) -> RoundTrace:
        traced.append(int(kw["iterations"]))  # type: ignore[call-overload]
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "trace_round", counted)
    doc = _profile(factory, peaks_cache)
    (case,) = doc.cases
    assert case.status == "ok", case.error
    assert traced == [2, 2, 2, 2], "every round after the first traces its trace_iters iterations once"
    by_key = {k.key: k for k in case.kernels}
    mm, tanh = by_key["aten::mm"], by_key["aten::tanh"]
    for k in (mm, tanh):
        d = k.duration_us
        assert d.round_samples == [2] * 5 and d.samples is not None and len(d.samples) == 10
        assert d.median == pytest.approx(statistics.median(d.samples), abs=1e-3)
        assert d.ci_low is not None and d.ci_high is not None and d.ci_low <= d.median <= d.ci_high
    assert all(v > 0 for v in mm.duration_us.samples or [])
    # the tanh ran in the first round only: its two traced iterations there, zeros in the four rounds after
    samples = tanh.duration_us.samples or []
    assert all(v > 0 for v in samples[:2]) and samples[2:] == [0.0] * 8
    assert tanh.duration_us.median == 0.0 and tanh.share == 0.0
    # rates, shares and the reconciliation follow the pooled medians
    assert mm.share == pytest.approx(1.0)
    assert case.reconciliation is not None
    assert case.reconciliation.kernel_sum_us == pytest.approx(sum(k.duration_us.median for k in case.kernels))


def test_a_round_whose_trace_cannot_be_read_leaves_its_samples_out(
    factory: object, peaks_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [0]
    real = runner.trace_round

    class Unreadable:
        def chrome(self) -> dict[str, object]:
            raise RuntimeError("a round's trace is read once")

    def every_other(*args: object, **kw: object) -> object:
        calls[0] += 1
        return Unreadable() if calls[0] % 2 else real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "trace_round", every_other)
    (case,) = _profile(factory, peaks_cache).cases
    assert case.status == "ok", case.error
    assert all(k.duration_us.round_samples == [2, 2, 2] for k in case.kernels)


DATA = Path(__file__).resolve().parents[1] / "data"


def test_a_later_round_whose_trace_caught_no_kernel_is_left_out_not_counted_as_zero() -> None:
    """On an H100 (torch 2.11) every later round's profiler session caught the iterations' CPU ranges and no GPU
    kernel: pooled as zeros, they made every kernel of the case 0 µs. The first round's trace is that run's own."""
    import copy
    import gzip
    import json

    from attnprof.core.attribution import parse_trace
    from attnprof.core.documents import DurationStats, Kernel, load_result
    from attnprof.core.measure.kernel_rounds import pool_durations, round_durations

    trace = json.loads(gzip.decompress((DATA / "h100" / "trace_cudnn_first_round.json.gz").read_bytes()))
    first = parse_trace(trace)
    blind = copy.deepcopy(trace)
    blind["traceEvents"] = [
        e for e in blind["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    later = parse_trace(blind)
    assert later.kernels == [] and later.iterations  # the iterations were traced; no kernel was caught
    table, _ = round_durations(first)
    kernels = [
        Kernel(
            name=name,
            key=name[:40],
            phase=phase,
            launches_per_iter=1,
            duration_us=DurationStats(median=0.0, p25=0.0, p75=0.0),
        )
        for name, phase in table
    ]
    environment = load_result(DATA / "h200" / "attnprof" / "result-ncu.json").environment
    pooled = pool_durations(kernels, [first, later, later, later], dtype="bf16", environment=environment)
    (attention,) = pooled
    assert attention.duration_us.median == 81.569 and attention.duration_us.round_samples == [3]
    assert attention.share == 1.0
