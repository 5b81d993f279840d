"""Result documents for the analysis tests, built from the result models with H200-like numbers.

Numbers follow H200 measurements of SDPA: B=1, H=32, S=2048, D=128, bf16 forward; cuDNN ~87 us, flash ~167 us,
efficient ~268 us; within-run CV ~0.8%; medians of separate processes within 0.5-1.4% of each other (the figures
docs/regression-method.md quotes in "The timing test: runs, then samples"). Real documents found under
tests/data/results/ or bench/reports/data/ are used as well (``real_documents``). Imported by the other
``test_analysis_*`` files; its own tests check that what it builds is a valid result document.
"""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from attnprof.core.analysis.kernel_samples import median_interval, rounds_of
from attnprof.core.attribution import quantile
from attnprof.core.documents import (
    Accuracy,
    Achieved,
    Case,
    CaseError,
    Device,
    DurationStats,
    Environment,
    Kernel,
    LatencyStats,
    Peaks,
    PeakValue,
    ResultDocument,
    RunInfo,
    SuiteInfo,
    Thresholds,
    Work,
    parse_result,
)

ROOT = Path(__file__).resolve().parents[2]
DATA_DIRS = [ROOT / "tests" / "data" / "results", ROOT / "bench" / "reports" / "data"]

FLOPS = 4 * 32 * 2048 * 2048 * 128  # forward, non-causal
BYTES_MIN = 2 * (3 * 32 * 2048 * 128) + 4 * 32 * 2048

BACKENDS: dict[str, dict[str, Any]] = {
    "cudnn": {
        "median_us": 87.0,
        "kernels": [
            (
                "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16",
                "fused_attention",
                0.97,
                [16, 32, 1],
                [384, 1, 1],
                168,
                204800,
                0.125,
            ),
        ],
    },
    "flash": {
        "median_us": 167.0,
        "kernels": [
            ("pytorch_flash::flash_fwd_kernel", "fused_attention", 0.98, [16, 32, 1], [128, 1, 1], 255, 98304, 0.125),
        ],
    },
    "efficient": {
        "median_us": 268.0,
        "kernels": [
            (
                "fmha_cutlassF_bf16_aligned_64x128_rf_sm80",
                "fused_attention",
                0.98,
                [32, 32, 1],
                [128, 1, 1],
                128,
                65536,
                0.1875,
            ),
        ],
    },
    "math": {
        "median_us": 2910.0,
        "kernels": [
            ("elementwise_kernel<copy bf16->fp32>", "cast", 0.025, [4096, 1, 1], [128, 1, 1], 32, 0, 1.0),
            (
                "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma",
                "qk_matmul",
                0.29,
                [128, 32, 1],
                [256, 1, 1],
                128,
                32768,
                0.25,
            ),
            ("softmax_warp_forward", "softmax", 0.12, [65536, 1, 1], [128, 1, 1], 40, 0, 0.75),
            ("isneginf_kernel", "softmax", 0.05, [65536, 1, 1], [128, 1, 1], 24, 0, 1.0),
            (
                "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_ffma",
                "av_matmul",
                0.28,
                [64, 32, 1],
                [256, 1, 1],
                128,
                32768,
                0.25,
            ),
        ],
    },
}


def latency_samples(
    median_us: float, *, n: int = 100, cv: float = 0.008, seed: int = 0, bimodal: float = 0.0
) -> list[float]:
    """Lognormal latency samples (microseconds) around ``median_us``; ``bimodal`` of them 4% slower."""
    rng = np.random.default_rng(seed)
    x = median_us * np.exp(cv * rng.standard_normal(n))
    if bimodal:
        slow = rng.random(n) < bimodal
        x[slow] *= 1.04
    return [float(v) for v in x]


def stats_of(samples: list[float]) -> LatencyStats:
    x = np.asarray(samples)
    return LatencyStats(
        samples=samples,
        median=float(np.median(x)),
        p25=float(np.percentile(x, 25)),
        p75=float(np.percentile(x, 75)),
        min=float(x.min()),
        max=float(x.max()),
        cv=float(x.std() / x.mean()) if x.mean() > 0 else 0.0,
        warmup=10,
    )


def kernel_durations(
    median_us: float,
    *,
    rounds: int,
    seed_text: str,
    iters: int = 3,
    round_sd: float = 0.003,
    iter_sd: float = 0.002,
    pinned: dict[tuple[int, int], float] | None = None,
) -> DurationStats:
    """A kernel's durations as a profile records them: ``iters`` traced iterations in each of ``rounds`` rounds,
    lognormal around ``median_us`` (a round's offset, sd ``round_sd``; an iteration's, ``iter_sd``), scaled so that
    the pooled median is ``median_us``; after that, iteration ``(round, iteration)`` of ``pinned`` reads exactly
    ``median_us`` times its factor (a disturbed one, 1.19: 19% slow). Seeded by ``seed_text``."""
    rng = np.random.default_rng(zlib.crc32(seed_text.encode()))
    x = np.exp(round_sd * rng.standard_normal((rounds, 1))) * np.exp(iter_sd * rng.standard_normal((rounds, iters)))
    x = median_us * x / float(np.median(x))
    for (r, i), factor in (pinned or {}).items():
        x[r, i] = median_us * factor
    samples = [round(float(v), 4) for v in x.ravel()]
    stats = DurationStats(
        median=quantile(samples, 0.5),
        p25=quantile(samples, 0.25),
        p75=quantile(samples, 0.75),
        samples=samples,
        round_samples=[iters] * rounds,
    )
    interval = median_interval(rounds_of(stats) or [], seed_text)
    if interval is None:
        return stats
    return stats.model_copy(update={"ci_low": interval[0], "ci_high": interval[1]})


def make_kernels(
    backend: str,
    case_us: float,
    *,
    counters: bool = False,
    scale: float = 1.0,
    rounds: int | None = None,
    seed_text: str = "",
) -> list[Kernel]:
    """The backend's kernels at ``case_us`` per iteration; with ``rounds``, each holds every round's traced
    iterations as a current profile records them (``kernel_durations``), else one median as older documents do."""
    out = []
    for key, phase, share, grid, block, regs, smem, occ in BACKENDS[backend]["kernels"]:
        us = case_us * share * scale
        duration = (
            kernel_durations(us, rounds=rounds, seed_text=f"{seed_text}|{key}")
            if rounds
            else DurationStats(median=us, p25=us * 0.995, p75=us * 1.005)
        )
        cnt = None
        if counters:
            cnt = {"dram__bytes_read.sum": BYTES_MIN * share * 0.8, "dram__bytes_write.sum": BYTES_MIN * share * 0.2}
        out.append(
            Kernel(
                name=key + "_kernel0",
                key=key,
                phase=phase,
                launches_per_iter=1,
                duration_us=duration,
                grid=list(grid),
                block=list(block),
                registers_per_thread=regs,
                shared_mem_bytes=smem,
                theoretical_occupancy=occ,
                counters=cnt,
            )
        )
    return out


def make_case(
    case_id: str = "prefill[backend=cudnn]",
    *,
    backend: str = "cudnn",
    median_us: float | None = None,
    factor: float = 1.0,
    n: int = 100,
    cv: float = 0.008,
    seed: int = 0,
    bound: str | None = "latency",
    status: str = "ok",
    accuracy_ok: bool = True,
    rel_l2_err: float = 2e-3,
    counters: bool = False,
    thresholds: Thresholds | None = None,
    samples: list[float] | None = None,
    bimodal: float = 0.0,
    kernels: list[Kernel] | None = None,
    kernel_rounds: int | None = None,
    kernel_seed: str = "",
) -> Case:
    """One case; ``factor`` multiplies every time (1.03 = 3% slower). ``kernel_rounds``: its kernels hold that many
    rounds of traced iterations, seeded by ``kernel_seed`` and the case id (none: one median each, as older
    documents)."""
    base_us = (median_us or BACKENDS[backend]["median_us"]) * factor
    if status != "ok":
        return Case(
            id=case_id,
            name=case_id.split("[")[0],
            target="sdpa",
            params={"backend": backend},
            status=status,  # type: ignore[arg-type]
            error=CaseError(type="RuntimeError", message="No available kernel") if status == "failed" else None,
            backend_requested=backend,
            thresholds=thresholds or Thresholds(),
        )
    xs = samples if samples is not None else latency_samples(base_us, n=n, cv=cv, seed=seed, bimodal=bimodal)
    med = float(np.median(xs))
    return Case(
        id=case_id,
        name=case_id.split("[")[0],
        target="sdpa",
        params={"backend": backend, "seq_q": 2048},
        thresholds=thresholds or Thresholds(),
        status="ok",
        backend_requested=backend,
        backend_used=backend,
        latency_us=stats_of(xs),
        work=Work(flops=FLOPS, bytes_min=BYTES_MIN),
        achieved=Achieved(
            tflops=FLOPS / (med * 1e-6) / 1e12,
            gbps=BYTES_MIN / (med * 1e-6) / 1e9,
            bound=bound,  # type: ignore[arg-type]
        ),
        accuracy=Accuracy(
            reference="fp32 math",
            max_abs_err=rel_l2_err * 4,
            rel_l2_err=rel_l2_err,
            tolerance=1e-2,
            ok=accuracy_ok,
        ),
        kernels=kernels
        if kernels is not None
        else make_kernels(backend, med, counters=counters, rounds=kernel_rounds, seed_text=f"{kernel_seed}|{case_id}"),
    )


def make_doc(
    run_id: str,
    cases: list[Case],
    *,
    mode: str = "cuda",
    testbed_key: str = "h200-580.159-cuda",
    suspect: list[str] | None = None,
    torch: str = "2.11.0+cu130",
    suite_thresholds: Thresholds | None = None,
    day: int = 0,
) -> ResultDocument:
    gpu = mode == "cuda"
    return ResultDocument(
        run=RunInfo(
            id=run_id,
            created_at=datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=day),
            tool_version="0.1.0",
            mode=mode,  # type: ignore[arg-type]
            counters="ncu" if any(k.counters for c in cases for k in c.kernels) else "none",
            suspect=suspect,
        ),
        suite=SuiteInfo(name="llama7b", thresholds=suite_thresholds or Thresholds()),
        environment=Environment(
            device=Device(name="NVIDIA H200" if gpu else "cpu", kind="cuda" if gpu else "cpu", sm_count=132),
            driver="580.159" if gpu else None,
            cuda="13.0" if gpu else None,
            cudnn="9.19" if gpu else None,
            torch=torch,
            triton="3.6.0",
            python="3.11.7",
            host="gpu-host-1",
            peaks=Peaks(
                dram_gbps=PeakValue(value=4270.0, source="measured"),
                tflops={"bf16": PeakValue(value=750.0, source="measured")},
            ),
            testbed_key=testbed_key,
            testbed={"device": "NVIDIA H200" if gpu else "cpu", "driver": "580.159", "mode": mode},
            software={"torch": torch, "cudnn": "9.19", "triton": "3.6.0"},
        ),
        cases=cases,
    )


def runs(
    n_runs: int,
    *,
    factor: float = 1.0,
    run_sd: float = 0.004,
    seed: int = 0,
    prefix: str = "base",
    backends: tuple[str, ...] = ("cudnn",),
    **case_kw: Any,
) -> list[ResultDocument]:
    """``n_runs`` documents of the same cases, each run offset by a run-to-run factor (sd ``run_sd``)."""
    rng = np.random.default_rng(10_000 + seed)
    docs = []
    for r in range(n_runs):
        offset = float(np.exp(run_sd * rng.standard_normal()))
        run_id = f"{prefix}-{seed}-{r}"
        cases = [
            make_case(
                f"prefill[backend={b}]",
                backend=b,
                factor=factor * offset,
                seed=seed * 1000 + r * 10 + i,
                kernel_seed=run_id,
                **case_kw,
            )
            for i, b in enumerate(backends)
        ]
        docs.append(make_doc(run_id, cases, day=r))
    return docs


def grid(
    n_cases: int,
    *,
    factor: float = 1.0,
    offset: float = 1.0,
    seed: int = 0,
    run_id: str = "run",
    regress: dict[int, float] | None = None,
    n: int = 100,
) -> ResultDocument:
    """A grid of ``n_cases`` cases (48: a grid large enough for false-discovery control to matter) in one run;
    ``regress`` maps case -> factor."""
    rng = np.random.default_rng(seed)
    names = list(BACKENDS)[:3]
    cases = []
    for i in range(n_cases):
        b = names[i % 3]
        f = factor * offset * (regress or {}).get(i, 1.0)
        cases.append(
            make_case(
                f"grid[case={i},backend={b}]",
                backend=b,
                factor=f,
                n=n,
                seed=int(rng.integers(1 << 30)),
                median_us=BACKENDS[b]["median_us"] * (1 + i / 16),
            )
        )
    return make_doc(run_id, cases)


def scaled(doc: ResultDocument, factor: float, *, run_id: str | None = None) -> ResultDocument:
    """A copy of ``doc`` with every time multiplied by ``factor`` (rates divided)."""
    data = json.loads(doc.to_json())
    data["run"]["id"] = run_id or data["run"]["id"] + f"-x{factor:g}"
    for case in data["cases"]:
        lat = case.get("latency_us")
        if lat:
            lat["samples"] = [v * factor for v in lat["samples"]]
            for k in ("median", "p25", "p75", "min", "max"):
                lat[k] *= factor
        ach = case.get("achieved")
        if ach:
            for k in ("tflops", "gbps"):
                if ach.get(k) is not None:
                    ach[k] /= factor
        for k in case.get("kernels", []):
            for q in ("median", "p25", "p75"):
                k["duration_us"][q] *= factor
    return parse_result(data)


def real_documents() -> list[Path]:
    """Result documents committed beside the tests or by the H200 benchmark, if any."""
    return sorted(p for d in DATA_DIRS if d.is_dir() for p in d.glob("*.json"))


def write_fixtures(directory: Path) -> list[Path]:
    """Write three baseline runs and two candidates (same, 5% slower), their kernels with five rounds of traced
    iterations each."""
    directory.mkdir(parents=True, exist_ok=True)
    every = {"backends": ("cudnn", "flash", "efficient"), "kernel_rounds": 5}
    base = runs(3, seed=1, prefix="h200-base", **every)
    same = runs(1, seed=2, prefix="h200-same", **every)[0]
    slow = runs(1, seed=3, prefix="h200-slow", factor=1.05, **every)[0]
    paths = []
    for doc, name in [
        *((d, f"baseline-{i}") for i, d in enumerate(base)),
        (same, "candidate-same"),
        (slow, "candidate-5pct-slower"),
    ]:
        path = directory / f"synthetic-h200-{name}.json"
        path.write_text(doc.to_json() + "\n")
        paths.append(path)
    return paths
