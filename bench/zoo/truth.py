"""Ground truth of the zoo: each change's effect measured apart from the product, in one process, interleaved.

    python -m bench.zoo.truth --out DIR [--only a,b] [--blocks 30] [--budget-s 200]   # on the GPU host
    python -m bench.zoo.truth --quick --out DIR                                       # CPU: two changes, tiny

Both trees of a change are loaded in this process under names of their own (``zoo_<change>_base`` and
``..._head``: the project imports itself relatively, so two copies coexist), each case of the change's suite built
from its factory with the suite's parameters. Then, in ``--blocks`` blocks, both sides are built again (their tensors
land elsewhere, as in the profiler's rounds) and warmed up, and each times ``calls`` iterations back to back, the
order alternating AB, BA, ... . An iteration is timed as the profiler times one (docs/method.md): on CUDA a blocking
kernel holds the stream while the host queues the iteration (sized from its host time), then a read sweep of 256 MiB
evicts the L2, then CUDA events around the call; on CPU a read sweep larger than the last-level cache, then the
host's clock. Each block gives head / base of the two sides' medians; the effect is the median of those ratios minus
one, with a 95% bootstrap interval over blocks. Writes DIR/truth.json after every change.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from attnprof.core.suite import CaseSpec, load_suite
from bench.zoo import provenance, records, trees
from bench.zoo.changes import Change, select

METHOD = (
    "interleaved blocks (AB, BA, ...), both sides built anew and warmed up in each block, then timed back to back; "
    "each iteration after a hold kernel (CUDA) and a read sweep of 256 MiB (CUDA) or of twice the last-level cache "
    "(CPU), timed by CUDA events (CPU: the host's clock); effect = median over blocks of head / base medians - 1, "
    "95% interval by bootstrap over blocks (2,000 resamples)"
)
FLUSH_BYTES_CUDA = 256 * 1024 * 1024
FLUSH_BYTES_CPU = 64 * 1024 * 1024
CLOCK_MHZ = 1980.0  # cycles per µs of the hold kernel, at the top SM clock of an H100 or H200
TARGET_BLOCK_US = 2000.0  # kernel time per side and block: the calls per block follow from it

Call = tuple[Callable[..., Any], list[Any]]


def load_tree(root: Path, alias: str) -> ModuleType:
    """The project's package in ``root`` imported as ``alias`` (its modules import each other relatively)."""
    if alias in sys.modules:
        return sys.modules[alias]
    package = root / trees.PACKAGE
    spec = importlib.util.spec_from_file_location(
        alias, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


def factory(alias: str, target: str) -> Callable[[dict[str, Any], str], Any]:
    """The factory ``target`` (``zooattn.module:name``) of the tree loaded as ``alias``."""
    module_name, _, attr = target.partition(":")
    _, _, sub = module_name.partition(".")
    module = importlib.import_module(f"{alias}.{sub}" if sub else alias)
    found: Callable[[dict[str, Any], str], Any] = getattr(module, attr)
    return found


def build(make: Callable[[dict[str, Any], str], Any], case: CaseSpec, device: str) -> Call:
    """The case's callable and arguments, as the profiler's custom-target contract returns them."""
    built = make(dict(case.params), device)
    if isinstance(built, dict):
        return built["fn"], list(built["args"])
    return built[0], list(built[1])


class Timer:
    """Iterations timed as the profiler times them (see the module's docstring); microseconds."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        size = FLUSH_BYTES_CUDA if self.cuda else FLUSH_BYTES_CPU
        self.buffer = torch.ones(size // 4, dtype=torch.int32, device=device)
        self.sink = torch.zeros((), dtype=torch.int32, device=device)

    def flush(self) -> None:
        torch.amax(self.buffer, dim=0, out=self.sink)

    def host_us(self, call: Call) -> float:
        """Host time to queue one iteration, the device drained first."""
        fn, args = call
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            fn(*args)
            times.append((time.perf_counter_ns() - t0) / 1000.0)
        torch.cuda.synchronize()
        return statistics.median(times)

    def time(self, call: Call, n: int) -> list[float]:
        fn, args = call
        if not self.cuda:
            out = []
            for _ in range(n):
                self.flush()
                t0 = time.perf_counter_ns()
                fn(*args)
                out.append((time.perf_counter_ns() - t0) / 1000.0)
            return out
        host = self.host_us(call)
        hold = int((1.5 * host + 20.0) * CLOCK_MHZ)
        lead = int((500.0 + 3.0 * host) * CLOCK_MHZ)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
            for _ in range(n)
        ]
        collecting = gc.isenabled()
        gc.disable()
        try:
            torch.cuda._sleep(lead)  # type: ignore[no-untyped-call]
            for start, end in events:
                torch.cuda._sleep(hold)  # type: ignore[no-untyped-call]
                self.flush()
                start.record()
                fn(*args)
                end.record()
        finally:
            if collecting:
                gc.enable()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1000.0 for start, end in events]


def bootstrap_ci(ratios: Sequence[float], *, reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the median of ``ratios`` (resampled with replacement), as effects."""
    values = np.asarray(ratios, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(values[rng.integers(0, len(values), size=(reps, len(values)))], axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low) - 1.0, float(high) - 1.0


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure_case(
    makers: dict[str, Callable[[dict[str, Any], str], Any]],
    case: CaseSpec,
    device: str,
    timer: Timer,
    *,
    blocks: int,
    calls: int | None,
) -> records.TruthCase:
    """The case's effect (head against base) over ``blocks`` interleaved blocks."""
    # First builds one side after the other, so that whatever tunes itself by timing (autotune, max-autotune
    # compiles) tunes on an idle device.
    probe: dict[str, float] = {}
    for side in ("base", "head"):
        call = build(makers[side], case, device)
        for _ in range(3):
            call[0](*call[1])
        _sync(device)
        probe[side] = statistics.median(timer.time(call, 5))
        del call
    if calls is None:
        calls = max(10, min(40, round(TARGET_BLOCK_US / max(probe["base"], 1.0))))
    medians: dict[str, list[float]] = {"base": [], "head": []}
    samples: dict[str, list[float]] = {"base": [], "head": []}
    for i in range(blocks):
        order = ("base", "head") if i % 2 == 0 else ("head", "base")
        built = {side: build(makers[side], case, device) for side in order}
        for side in order:
            for _ in range(2):
                built[side][0](*built[side][1])
        _sync(device)
        for side in order:
            found = timer.time(built[side], calls)
            medians[side].append(statistics.median(found))
            samples[side] += found
        del built
    ratios = [h / b for b, h in zip(medians["base"], medians["head"], strict=True)]
    low, high = bootstrap_ci(ratios)
    return records.TruthCase(
        case=case.id,
        base_us=statistics.median(samples["base"]),
        head_us=statistics.median(samples["head"]),
        effect=statistics.median(ratios) - 1.0,
        ci_low=low,
        ci_high=high,
        blocks=blocks,
        calls_per_block=calls,
        block_ratios=ratios,
    )


def measure_change(
    change: Change, work: Path, device: str, timer: Timer, *, quick: bool, blocks: int, calls: int | None
) -> records.TruthChange:
    started = time.monotonic()
    found = trees.materialize(change, work, quick=quick)
    suite = load_suite(found.suite)
    tag = change.name.replace("-", "_")
    makers_by_side = {}
    out = records.TruthChange(change=change.name, identical=change.identical, expected=change.expected)
    for case in suite.cases:
        try:
            for side, root in (("base", found.base), ("head", found.head)):
                alias = f"zoo_{tag}_{side}"
                load_tree(root, alias)
                makers_by_side[side] = factory(alias, case.target)
            out.cases.append(measure_case(makers_by_side, case, device, timer, blocks=blocks, calls=calls))
        except Exception as exc:  # a case that cannot run is a finding of the zoo, not the end of it
            out.cases.append(records.TruthCase(case=case.id, error=f"{type(exc).__name__}: {exc}"[:2000]))
        if device == "cuda":
            torch.cuda.empty_cache()
    out.wall_s = round(time.monotonic() - started, 2)
    return out


def _say(text: str) -> None:
    print(text, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for truth.json")
    p.add_argument("--only", help="changes to measure (comma-separated names; default: all)")
    p.add_argument("--quick", action="store_true", help="two changes, tiny shapes, few blocks (a CPU host)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when there is one (cpu with --quick)")
    p.add_argument("--blocks", type=int, help="interleaved blocks per case (default 30; quick 6)")
    p.add_argument("--calls", type=int, help="timed calls per side and block (default: ~2 ms of the case, 10-40)")
    p.add_argument("--budget-s", type=float, default=1e9, help="start no change that would end after this")
    p.add_argument("--work", type=Path, help="where the trees are written (default: a temporary folder)")
    a = p.parse_args(argv)
    device = a.device or ("cuda" if torch.cuda.is_available() and not a.quick else "cpu")
    blocks = a.blocks or (6 if a.quick else 30)
    calls = a.calls or (5 if a.quick else None)
    changes = select(a.only, quick=a.quick)
    if device == "cpu":
        changes = [c for c in changes if c.cpu] if not a.only else changes
    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work or Path(tempfile.mkdtemp(prefix="attnprof-zoo-truth-"))
    started = time.monotonic()
    doc = records.TruthDoc(provenance=provenance.with_torch(device), method=METHOD, quick=a.quick)
    timer = Timer(device)
    _say(f"truth on {doc.provenance.machine}: {len(changes)} change(s), {blocks} blocks")
    slowest = 0.0
    for i, change in enumerate(changes, 1):
        spent = time.monotonic() - started
        if doc.changes and spent + 1.2 * slowest > a.budget_s:
            doc.stopped = f"budget: {spent:.0f} s of {a.budget_s:.0f} spent before {change.name}"
            _say(doc.stopped)
            break
        measured = measure_change(change, work, device, timer, quick=a.quick, blocks=blocks, calls=calls)
        slowest = max(slowest, measured.wall_s)
        doc.changes.append(measured)
        records.save(doc, a.out)
        for c in measured.cases:
            line = (
                f"{c.effect:+.2%} [{c.ci_low:+.2%}, {c.ci_high:+.2%}] ({c.base_us:,.1f} -> {c.head_us:,.1f} us)"
                if c.effect is not None and c.ci_low is not None and c.ci_high is not None
                else f"error: {c.error}"
            )
            _say(f"[{i}/{len(changes)} {change.name}] {c.case}: {line} in {measured.wall_s:.0f} s")
    done = {c.change for c in doc.changes}
    doc.not_run = [c.name for c in changes if c.name not in done]
    records.save(doc, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
