"""What the runner marks a case suspect for: a burst in its real samples, or (CPU) its threads waiting for a core."""

from __future__ import annotations

import re
import time
from pathlib import Path

from attnprof.core.documents import load_result
from attnprof.core.measure.case import _Timing
from attnprof.core.measure.environment import (
    ThreadTimes,
    disturbed_run_reasons,
    host_wait_reason,
    thread_times,
)
from attnprof.core.measure.runner import disturbance_reasons
from attnprof.core.measure.timing import TimingResult

REPO = Path(__file__).resolve().parents[2]
CPU_LOADED = REPO / "tests" / "data" / "service" / "cpu-run-1.json"
H200_RUN = REPO / "bench" / "reports" / "data" / "h200-2026-11-29" / "set-a" / "run3.json.gz"


def _samples(path: Path, case_id: str) -> list[float]:
    case = load_result(path).case(case_id)
    assert case is not None and case.latency_us is not None
    return list(case.latency_us.samples)


def test_a_real_burst_on_a_loaded_cpu_host_marks_the_case() -> None:
    # 9 of 20 samples at 22-44x the rest: the median (545.9 us) sits between the two groups.
    reasons = disturbance_reasons(_samples(CPU_LOADED, "sdpa[backend=flash,kv_heads=4]"))
    assert len(reasons) == 1
    assert reasons[0].startswith("a burst of 9 of 20 samples at 44x")
    assert "between samples 3 and 20" in reasons[0]


def test_a_160x_burst_in_real_h200_samples_marks_the_case_and_the_same_samples_without_it_do_not() -> None:
    samples = _samples(H200_RUN, "sdpa[backend=flash,pass=fwd]")
    assert disturbance_reasons(samples) == []
    burst = list(samples)
    for i in range(100, 110):
        burst[i] *= 160.0
    reasons = disturbance_reasons(burst)
    # 160x the median is a little more over the lower quartile, the usual time the burst is measured against.
    assert len(reasons) == 1
    assert re.match(rf"a burst of 10 of {len(samples)} samples at 1[6-7]\dx .* between samples 101 and 110", reasons[0])


def test_threads_waiting_for_a_core_mark_the_case_even_when_every_sample_is_alike() -> None:
    # A busy host can slow every sample of a case alike (measured: 20 samples at 12 ms for a 0.3 ms case).
    steady = [12_000.0 + i for i in range(20)]
    before = ThreadTimes(running_ns=10_000_000_000, waiting_ns=1_000_000_000)
    busy = ThreadTimes(running_ns=before.running_ns + 300_000_000, waiting_ns=before.waiting_ns + 200_000_000)
    reasons = disturbance_reasons(steady, waits_before=before, waits_after=busy)
    assert reasons == [
        "the profiler's threads waited for a core 40% of their runnable time while timing (200 ms): "
        "the host was busy with other work"
    ]
    quiet = ThreadTimes(running_ns=before.running_ns + 600_000_000, waiting_ns=before.waiting_ns + 12_000_000)
    assert disturbance_reasons(steady, waits_before=before, waits_after=quiet) == []
    assert host_wait_reason(None, busy) is None and host_wait_reason(before, before) is None


def test_steal_time_marks_the_case_where_the_thread_s_own_counts_cannot_see_it() -> None:
    # In a virtual machine a stolen stretch reads, to the guest, as time its thread ran: only /proc/stat's steal
    # column shows it. 30 of 200 host ticks stolen while timing (2 CPUs, one second) marks the case.
    steady = [300.0 + i for i in range(20)]
    before = ThreadTimes(running_ns=10_000_000_000, waiting_ns=0, steal_ticks=500, cpu_ticks=100_000)
    stolen = ThreadTimes(running_ns=before.running_ns + 900_000_000, waiting_ns=0, steal_ticks=530, cpu_ticks=100_200)
    assert disturbance_reasons(steady, waits_before=before, waits_after=stolen) == [
        "the hypervisor gave 15% of the host's CPU time to other guests while timing (steal time): the virtual "
        "machine's cores were taken from it"
    ]
    light = ThreadTimes(running_ns=stolen.running_ns, waiting_ns=0, steal_ticks=510, cpu_ticks=100_200)
    assert host_wait_reason(before, light) is None  # 5%
    brief = ThreadTimes(running_ns=stolen.running_ns, waiting_ns=0, steal_ticks=505, cpu_ticks=100_010)
    assert host_wait_reason(before, brief) is None  # 10 ticks: too short a stretch to judge


def test_steal_pools_over_the_rounds_that_read_the_host_s_ticks_on_both_sides() -> None:
    timing = _Timing()
    result = TimingResult(samples_us=[300.0] * 10, warmup=0, stopped_by="max_samples", wall_s=0.01)
    start = ThreadTimes(running_ns=0, waiting_ns=0, steal_ticks=500, cpu_ticks=100_000)
    for r in range(3):  # three rounds, 20 of 100 ticks stolen in each
        before = ThreadTimes(0, 0, start.steal_ticks + 20 * r, start.cpu_ticks + 100 * r)
        timing.add(result, before, ThreadTimes(1, 0, before.steal_ticks + 20, before.cpu_ticks + 100))
    # a round whose /proc/stat could not be read on one side adds nothing, not the ticks since boot
    timing.add(result, ThreadTimes(0, 0, 0, 0), ThreadTimes(1, 0, 900, 200_000))
    waits = timing.waits()
    assert waits[1] is not None and (waits[1].steal_ticks, waits[1].cpu_ticks) == (60, 300)
    reasons = disturbance_reasons(timing.samples, waits_before=waits[0], waits_after=waits[1])
    assert reasons and reasons[-1].startswith("the hypervisor gave 20% of the host's CPU time to other guests")


def test_thread_times_are_read_from_this_process_and_grow_with_work() -> None:
    first = thread_times()
    assert first is not None  # Linux keeps schedstat; the CI and the GPU hosts run Linux
    end = time.thread_time() + 0.05  # 50 ms on a core, however busy the host is
    while time.thread_time() < end:
        pass
    second = thread_times()
    assert second is not None
    assert second.running_ns - first.running_ns >= 40_000_000
    assert second.waiting_ns >= first.waiting_ns
    # the host's ticks from /proc/stat: they grow with the 50 ms on a core, steal never beyond them
    assert second.cpu_ticks >= first.cpu_ticks + 1 and 0 <= second.steal_ticks - first.steal_ticks <= 1 + (
        second.cpu_ticks - first.cpu_ticks
    )


def test_the_run_is_suspect_only_when_most_cases_were_disturbed() -> None:
    assert disturbed_run_reasons(4, 8) == []
    assert disturbed_run_reasons(0, 0) == []
    assert disturbed_run_reasons(5, 8) == [
        "5 of 8 cases were disturbed while timing (bursts of slow samples or a busy host)"
    ]
