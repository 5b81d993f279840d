"""The job jail on a GPU host: what the host offers, each strategy's self-test with the GPU passed in, CUDA inside the
jail, and the suite profiled alternately directly and in the jail (bench/reports/jail.md).

    python3 -m bench.jail_h200 probe               # the host: user, kernel, user namespaces, GPU nodes, tools
    python3 -m bench.jail_h200 selftest            # each strategy's self-test, with this host's GPU nodes
    python3 -m bench.jail_h200 cuda                # CUDA, NVML and the device nodes as a job in the jail sees them
    python3 -m bench.jail_h200 ab --pairs 3        # SUITE profiled direct, jailed, jailed, direct, ... (ABBA)
    python3 -m bench.jail_h200 start --device cpu  # the jail's own cost: `python -c pass` direct and jailed
    python3 -m bench.jail_h200 report --data DIR   # here: the report from what the GPU host wrote

Each step writes JSON into --out (default $OUT or out/jail); run from the repository root with PYTHONPATH=. on the
GPU host. A jailed run is the profile worker's own: the same command line, scratch folder, environment and limits
(attnprof.worker.profile.profile), with ``--pid-namespace``; a direct run is that command line with no jail, in a fresh
scratch folder of its own too (each compiles in caches of its own, as every job does).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from attnprof.contract.ids import JobId
from attnprof.core.documents import ResultDocument
from attnprof.worker.profile import handback, outcome, sandbox
from attnprof.worker.profile import jail as jails

ROOT = Path(__file__).resolve().parents[1]


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def probe() -> dict[str, Any]:
    return {
        "uid": os.geteuid(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "bwrap": shutil.which("bwrap"),
        "bwrap_version": subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
        if shutil.which("bwrap")
        else None,
        "setpriv": Path("/usr/bin/setpriv").exists(),
        "unshare": Path("/usr/bin/unshare").exists(),
        "max_user_namespaces": _read("/proc/sys/user/max_user_namespaces"),
        "unprivileged_userns_clone": _read("/proc/sys/kernel/unprivileged_userns_clone"),
        "apparmor_restrict_unprivileged_userns": _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        "nobody": _id("nobody"),
        "gpu_nodes": sorted(str(p) for p in Path("/dev").glob("nvidia*")),
        "gpu_minor": _minor(),
        "cap_eff": next((ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")), None),
    }


def _id(name: str) -> str | None:
    import pwd

    try:
        u = pwd.getpwnam(name)
        return f"{u.pw_uid}:{u.pw_gid}"
    except KeyError:
        return None


def _minor() -> int | None:
    from attnprof.worker.profile.device import probe_minor

    return probe_minor()


# Where the GPU host's missing packages (pydantic, ...) were installed from carried wheels: the jail binds it read-only
# and puts it on the job's path, as ATTNPROF_WORKER__SANDBOX_RO_BINDS would for a real worker.
SITE = os.environ.get("BENCH_SITE")


DEVICE = "cuda"


def _jail(strategy: str) -> jails.Jail:
    return jails.Jail.build(
        strategy=strategy,  # type: ignore[arg-type]
        devices=jails.gpu_nodes(_minor()) if DEVICE == "cuda" else [],
        extra_ro_binds=[SITE] if SITE else [],
    )


def selftest(scratch_root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    strategies = ["privileged", "userns"] if os.geteuid() == 0 else ["userns"]
    for strategy in strategies:
        started = time.perf_counter()
        try:
            jail = _jail(strategy)
            jail.self_test(scratch_root, forbidden=[Path.home(), scratch_root], addresses=[("127.0.0.1", 22)])
            out[strategy] = {"ok": True, "seconds": round(time.perf_counter() - started, 3), "devices": jail.devices}
        except jails.JailUnavailable as exc:
            out[strategy] = {"ok": False, "why": str(exc), "seconds": round(time.perf_counter() - started, 3)}
    return out


_CUDA_INSIDE = r"""
import json, os, time
t = time.perf_counter()
import torch
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
y = x @ x
torch.cuda.synchronize()
out = {"device": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(), "ok": bool(torch.isfinite(y).all()),
       "dev": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")), "uid": os.getuid(),
       "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "seconds": time.perf_counter() - t}
try:
    f = torch.compile(lambda a: torch.softmax(a.float() * 2, -1).to(a.dtype))
    out["compiled"] = bool(torch.isfinite(f(x[:256, :256])).all())
except Exception:
    import traceback
    out["compiled"] = traceback.format_exc()[-4000:]
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    out["nvml_pids"] = sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
except Exception as e:
    out["nvml"] = repr(e)
json.dump(out, open("/job/probe-out.json", "w"))
"""


def cuda(scratch_root: Path, strategy: str) -> dict[str, Any]:
    from attnprof.worker.profile import scratch as scratches

    jail = _jail(strategy)
    made = scratches.make(scratch_root, JobId("cuda-probe"), 1, disk_bytes=0)
    scratch = made.job
    try:
        (scratch / "src" / "probe.py").write_text(_CUDA_INSIDE)
        jail.prepare(scratch, etc=made.etc)
        done = sandbox.run(
            jail.argv([sys.executable, "-I", "/job/src/probe.py"], scratch=scratch, etc=made.etc, peaks=None),
            cwd=scratch,
            env={**_env(jails.JOB_ROOT), **jail.env()},
            limits=sandbox.ProcessLimits(timeout_s=300, memory_bytes=64 << 30, max_processes=jail.max_processes),
            run_as=jail.run_as,
            lines=50,
        )
        result: dict[str, Any] = {"exit_code": done.exit_code, "wall_s": round(done.wall_s, 2), "tail": done.tail}
        if (scratch / "probe-out.json").exists():
            result["inside"] = json.loads((scratch / "probe-out.json").read_text())
        inside = result.get("inside", {})
        result["nvml_pids_of_the_job"] = sorted(set(inside.get("nvml_pids", [])) & done.pids)
        result["nvml_pids_foreign"] = sorted(set(inside.get("nvml_pids", [])) - done.pids)
        return result
    finally:
        scratches.remove(made.path)


def _env(root: Path) -> dict[str, str]:
    parent = jails.profiler_parent()
    paths = [p for p in (parent, Path(SITE) if SITE else None) if p]
    return sandbox.scrubbed_env(
        os.environ, home=root / "home", tmp=root / "tmp", pythonpath=root / "src", library_paths=paths
    )


def _profile_once(
    mode: str, suite: Path, scratch_root: Path, cache: Path, jail: jails.Jail | None, *, intruder: bool = False
) -> dict[str, Any]:
    """One run; ``intruder``: another CUDA process holds the GPU for 20 s from 3 s in (the run must be suspect)."""
    from attnprof.worker.profile import scratch as scratches
    from attnprof.worker.profile.device import GpuWatch
    from attnprof.worker.profile.profile import SPEC_NAME

    made = scratches.make(scratch_root, JobId(f"ab-{mode}"), 1, disk_bytes=0)

    scratch = made.job
    try:
        (scratch / SPEC_NAME).write_text(suite.read_text())
        root = jails.JOB_ROOT if jail else scratch
        argv = [
            sys.executable, "-m", "attnprof.core", "profile", str(root / SPEC_NAME), "--device", DEVICE,
            "--out", str(root / "out" / "result.json"), "--trace-dir", str(root / "out" / "traces"),
            "--cache-dir", str(jails.PEAKS_DIR if jail else cache), "--quiet",
        ]  # fmt: skip
        if jail:
            jail.prepare(scratch, etc=made.etc)
            argv = jail.argv([*argv, "--pid-namespace"], scratch=scratch, etc=made.etc, peaks=cache, cwd=root / "src")
        watch = GpuWatch() if jail and DEVICE == "cuda" else None
        other = None
        if intruder:
            code = "import time, torch; time.sleep(3); x = torch.ones(1, device='cuda'); time.sleep(20)"
            other = subprocess.Popen([sys.executable, "-c", code])
        done = sandbox.run(
            argv,
            watch=watch,
            cwd=scratch / "src",
            env={**_env(root), **(jail.env() if jail else {})},
            limits=sandbox.ProcessLimits(
                timeout_s=500, memory_bytes=96 << 30, max_processes=jail.max_processes if jail else 0
            ),
            run_as=jail.run_as if jail else None,
            lines=20,
        )
        if other is not None:
            other.kill()
            other.wait()
        with handback.Folder(scratch) as folder:
            read = outcome.read_document(folder, "out/result.json")
        doc = read if isinstance(read, ResultDocument) else None
        if doc is not None and watch is not None:
            outcome.note_foreign_gpu_processes(doc, watch.foreign(done.pids))
            watch.close()
        cases = {}
        for c in doc.cases if doc else []:
            median = c.latency_us.median if c.latency_us else None
            error = c.error.message if c.error else ""
            cases[c.id] = {"status": c.status, "median_us": median, "error": error[-3000:]}
        env = doc.environment if doc else None
        return {
            "mode": mode + ("+intruder" if intruder else ""),
            "exit_code": done.exit_code,
            "wall_s": round(done.wall_s, 3),
            "run_wall_s": doc.run.wall_s if doc else None,
            "suspect": doc.run.suspect if doc else None,
            "health": {
                name: health.model_dump(mode="json") if health else None
                for name, health in (("health_start", env and env.health_start), ("health_end", env and env.health_end))
            },
            "cases": cases,
            "tail": done.tail[-5:],
        }
    finally:
        scratches.remove(made.path)


def ab(suite: Path, pairs: int, scratch_root: Path, out: Path, strategy: str, budget_s: float) -> list[dict[str, Any]]:
    cache = scratch_root / "peaks"
    subprocess.run(
        [sys.executable, "-m", "attnprof.core", "calibrate", "--device", DEVICE, "--cache-dir", str(cache)],
        check=True,
        env=_env(scratch_root),
    )
    jail = _jail(strategy)
    order = []
    for i in range(pairs):
        order += ["direct", "jailed"] if i % 2 == 0 else ["jailed", "direct"]
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for mode in order:
        if runs and time.monotonic() - started + 1.2 * max(r["wall_s"] for r in runs) > budget_s:
            print(f"budget: stopping before a {mode} run", flush=True)
            break
        run = _profile_once(mode, suite, scratch_root, cache, jail if mode == "jailed" else None)
        runs.append(run)
        print(f"{mode}: exit {run['exit_code']}, {run['wall_s']:.1f} s, suspect {run['suspect']}", flush=True)
        (out / "ab.json").write_text(json.dumps({"strategy": strategy, "suite": str(suite), "runs": runs}, indent=1))
    if jail is not None and pairs and DEVICE == "cuda" and time.monotonic() - started < budget_s:
        run = _profile_once("jailed", suite, scratch_root, cache, jail, intruder=True)
        runs.append(run)
        print(f"jailed with an intruder: exit {run['exit_code']}, suspect {run['suspect']}", flush=True)
        (out / "ab.json").write_text(json.dumps({"strategy": strategy, "suite": str(suite), "runs": runs}, indent=1))
    return runs


def start(scratch_root: Path, strategy: str, n: int, out: Path) -> dict[str, Any]:
    """What the jail itself costs a job: ``python -c pass`` direct and jailed, alternately, ``n`` times each (the
    jailed time includes preparing the scratch folder and the bubblewrap set-up)."""
    from attnprof.worker.profile import scratch as scratches

    jail = _jail(strategy)
    times: dict[str, list[float]] = {"direct": [], "jailed": []}
    for i in range(2 * n):
        mode = ("direct", "jailed")[(i + i // 2) % 2]  # ABBA
        made = scratches.make(scratch_root, JobId("start"), 1, disk_bytes=0)
        scratch = made.job
        t = time.perf_counter()
        if mode == "jailed":
            jail.prepare(scratch, etc=made.etc)
            argv = jail.argv([sys.executable, "-c", "pass"], scratch=scratch, etc=made.etc, peaks=None)
        else:
            argv = [sys.executable, "-c", "pass"]
        done = sandbox.run(
            argv,
            cwd=scratch,
            env=_env(jails.JOB_ROOT if mode == "jailed" else scratch),
            limits=sandbox.ProcessLimits(timeout_s=60, memory_bytes=8 << 30, poll_s=0.01),
            run_as=jail.run_as if mode == "jailed" else None,
        )
        times[mode].append(time.perf_counter() - t)
        assert done.exit_code == 0, done.tail
        scratches.remove(made.path)
    result = {
        "strategy": strategy,
        "n": n,
        **{f"{m}_ms_median": round(1000 * statistics.median(v), 1) for m, v in times.items()},
        **{f"{m}_ms_p90": round(1000 * sorted(v)[int(0.9 * (len(v) - 1))], 1) for m, v in times.items()},
    }
    (out / "start.json").write_text(json.dumps(result, indent=1))
    return result


def report(data: Path) -> str:
    """A markdown summary of what the GPU host wrote (the report's figures)."""
    found = json.loads((data / "ab.json").read_text())
    runs = found["runs"]
    by = {m: [r for r in runs if r["mode"] == m and r["exit_code"] == 0] for m in ("direct", "jailed")}
    lines = [f"strategy {found['strategy']}, suite {found['suite']}, {len(runs)} runs", ""]
    lines.append("| mode | runs | wall s (median) | wall s (each) | suspect |")
    lines.append("|---|---|---|---|---|")
    for mode, rs in by.items():
        walls = [r["wall_s"] for r in rs]
        lines.append(
            f"| {mode} | {len(rs)} | {statistics.median(walls):.2f} | {', '.join(f'{w:.1f}' for w in walls)} | "
            f"{sum(1 for r in rs if r['suspect'])} of {len(rs)} |"
        )
    lines += ["", "| case | direct µs | jailed µs | Δ |", "|---|---|---|---|"]
    ids = sorted({c for r in runs for c in r["cases"]})
    for case in ids:
        med = {}
        for mode, rs in by.items():
            vals = [r["cases"][case]["median_us"] for r in rs if r["cases"].get(case, {}).get("median_us")]
            med[mode] = statistics.median(vals) if vals else None
        d, j = med["direct"], med["jailed"]
        delta = f"{(j - d) / d:+.2%}" if d and j else "—"
        lines.append(f"| `{case}` | {f'{d:,.1f}' if d else '—'} | {f'{j:,.1f}' if j else '—'} | {delta} |")
    return "\n".join(lines)


def plot(data: Path, path: Path) -> None:
    """Per case: the jailed runs' median latency against the direct runs' (%), each run as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = json.loads((data / "ab.json").read_text())["runs"]
    direct = [r for r in runs if r["mode"] == "direct" and r["exit_code"] == 0]
    jailed = [r for r in runs if r["mode"] == "jailed" and r["exit_code"] == 0]
    cases = sorted({c for r in direct for c, v in r["cases"].items() if v.get("median_us")})
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(cases) + 1.2))
    for i, case in enumerate(cases):
        base = statistics.median(r["cases"][case]["median_us"] for r in direct)
        for r, colour in [*((r, "tab:blue") for r in direct), *((r, "tab:orange") for r in jailed)]:
            value = r["cases"].get(case, {}).get("median_us")
            if value:
                ax.plot(100 * (value - base) / base, i, "o", color=colour, ms=4, alpha=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(cases)), cases, fontsize=7)
    ax.set_xlabel("case median latency against the direct runs' median (%)")
    ax.set_title("H200: each run's case latency, direct (blue) and in the jail (orange)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=["probe", "selftest", "cuda", "ab", "start", "report", "all"])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("-n", type=int, default=20, help="start: runs of each mode")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "out/jail"))
    p.add_argument("--scratch", type=Path, default=Path("/var/tmp/attnprof-jail-bench"))
    p.add_argument("--suite", type=Path, default=ROOT / "examples" / "llama7b.toml")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--budget-s", type=float, default=400)
    p.add_argument("--data", type=Path)
    a = p.parse_args()
    global DEVICE
    DEVICE = a.device
    if a.step == "report":
        print(report(a.data))
        plot(a.data, a.out / "jail-h200.png")
        return
    a.out.mkdir(parents=True, exist_ok=True)
    a.scratch.mkdir(parents=True, exist_ok=True)
    a.scratch.chmod(0o755)
    results: dict[str, Any] = {}
    if a.step in ("probe", "all"):
        results["probe"] = probe()
    if a.step in ("selftest", "all"):
        results["selftest"] = selftest(a.scratch)
    strategy = a.strategy
    if strategy == "auto":
        passed = [s for s, r in (results.get("selftest") or selftest(a.scratch)).items() if r["ok"]]
        strategy = passed[0] if passed else "none"
    results["strategy"] = strategy
    if strategy != "none" and a.step in ("start", "all"):
        results["start"] = start(a.scratch, strategy, a.n, a.out)
    if strategy != "none" and DEVICE == "cuda" and a.step in ("cuda", "all"):
        results["cuda"] = cuda(a.scratch, strategy)
    (a.out / f"{a.step}.json").write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps(results, indent=1, default=str), flush=True)
    if strategy != "none" and a.step in ("ab", "all"):
        ab(a.suite, a.pairs, a.scratch, a.out, strategy, a.budget_s)


if __name__ == "__main__":
    main()
