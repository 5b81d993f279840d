"""The CLI contract, through real processes: ``python -m attnprof.core`` and the ``attnprof`` console script.

Exit codes: 0 when every case ran or was skipped, 1 when a case failed (the document is still written
and the other cases measured), 2 on bad input (nothing run, nothing written, the message names the key).
``report`` and ``schema`` read files only and must not import torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from attnprof.core.documents import load_result, parse_result, result_json_schema
from attnprof.core.documents.comparison import comparison_json_schema
from tests.profiling_support import DATA, REPO

H200_RESULT = DATA / "h200" / "attnprof" / "result.json"
CPU_RESULT = DATA / "service" / "cpu-run-1.json"
KERNEL_COLUMNS = (
    "phase",
    "kernel",
    "launches",
    "latency",
    "share",
    "bound",
    "BW util",
    "compute util",
    "work from",
    "occupancy",
)
CUDNN_FPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16"


def attnprof_script() -> str:
    found = shutil.which("attnprof", path=str(Path(sys.executable).parent)) or shutil.which("attnprof")
    if found is None:
        pytest.skip("the attnprof console script is not installed (pip install -e .)")
    return found


def run(args: list[str], *, cwd: Path = REPO, script: bool = False) -> subprocess.CompletedProcess[str]:
    """Run a verb in a fresh process: the console script, or ``python -m attnprof.core``."""
    command = [attnprof_script()] if script else [sys.executable, "-m", "attnprof.core"]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def profile_args(suite: Path, tmp_path: Path, peaks_cache: Path, *extra: str) -> list[str]:
    return [
        "profile",
        str(suite),
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "out" / "result.json"),
        "--cache-dir",
        str(peaks_cache),
        *extra,
    ]


SMALL_MATH = """
[[cases]]
name = "attn"
target = "sdpa"
backends = ["math", "cudnn"]
q_heads = 2
seq_q = 8
head_dim = 8
dtype = "fp32"
"""


def test_profile_exits_0_when_every_case_ran_or_was_skipped(
    tmp_path: Path, peaks_cache: Path, write_suite: Callable[[str, str], Path]
) -> None:
    suite = write_suite("ok", SMALL_MATH)
    proc = run(profile_args(suite, tmp_path, peaks_cache, "--format", "markdown"))
    assert proc.returncode == 0, proc.stderr
    doc = load_result(tmp_path / "out" / "result.json")
    assert {c.id: c.status for c in doc.cases} == {"attn[backend=math]": "ok", "attn[backend=cudnn]": "skipped"}
    jsonschema.Draft202012Validator(result_json_schema()).validate(json.loads(doc.to_json()))
    assert doc.run.command is not None and doc.run.command.startswith("attnprof profile")
    # traces go beside --out by default
    assert (tmp_path / "out" / "result.traces" / "attn_backend=math_.trace.json.gz").is_file()
    # the report of the run is printed: the markdown table of each case that ran
    assert "## attn[backend=math]" in proc.stdout and "| phase | kernel |" in proc.stdout
    assert "skipped: the cudnn backend needs a CUDA device" in proc.stdout


def test_profile_exits_1_when_a_case_failed_and_still_writes_the_document(
    tmp_path: Path, peaks_cache: Path, write_suite: Callable[[str, str], Path]
) -> None:
    cases = """
[[cases]]
name = "broken"
target = "nosuchpkg.mod:factory"

[[cases]]
name = "naive"
target = "naive"
q_heads = 2
seq_q = 8
head_dim = 8
dtype = "fp32"
"""
    suite = write_suite("fails", cases)
    trace_dir = tmp_path / "traces"
    proc = run(
        profile_args(suite, tmp_path, peaks_cache, "--format", "json", "--trace-dir", str(trace_dir)), script=True
    )
    assert proc.returncode == 1, proc.stderr
    assert "1 case(s) failed: broken" in proc.stderr
    doc = load_result(tmp_path / "out" / "result.json")
    # the JSON report on stdout is the document itself, with nothing else mixed in (progress goes away)
    assert parse_result(json.loads(proc.stdout)) == doc
    broken, naive = doc.cases
    assert broken.status == "failed" and broken.error is not None and broken.error.type == "ImportError"
    assert naive.status == "ok" and naive.backend_used == "eager" and naive.latency_us is not None
    assert sorted(p.name for p in trace_dir.iterdir()) == ["naive.trace.json.gz"]


BAD_SUITES = {
    "unknown key": ("hed_dim = 8\nhead_dim = 8", "cases[0].hed_dim", "did you mean 'head_dim'"),
    "head_dim 0": ("head_dim = 0", "cases[0].head_dim", "must be >= 1"),
    "kv_heads not dividing q_heads": ("head_dim = 8\nkv_heads = 4", "cases[0].kv_heads", "multiple of kv_heads"),
    "negative seq": ("head_dim = 8\nseq_kv = -4", "cases[0].seq_kv", "must be >= 1"),
    "unknown dtype": ('head_dim = 8\ndtype = "fp8"', "cases[0].dtype", "'fp32', 'fp16', 'bf16'"),
    "bad toml": ("head_dim = = 8", "invalid TOML", "line"),
}


@pytest.mark.parametrize("problem", list(BAD_SUITES))
def test_profile_exits_2_on_bad_input_naming_the_key(
    problem: str, tmp_path: Path, peaks_cache: Path, write_suite: Callable[[str, str], Path]
) -> None:
    extra, key, allowed = BAD_SUITES[problem]
    suite = write_suite("bad", f'[[cases]]\nname = "a"\ntarget = "naive"\nq_heads = 6\nseq_q = 8\n{extra}\n')
    proc = run(profile_args(suite, tmp_path, peaks_cache))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and key in proc.stderr and allowed in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing run, nothing written


def test_profile_exits_2_on_a_missing_suite_file(tmp_path: Path, peaks_cache: Path) -> None:
    proc = run(profile_args(tmp_path / "nowhere.toml", tmp_path, peaks_cache))
    assert proc.returncode == 2
    assert "nowhere.toml" in proc.stderr and "cannot read the suite file" in proc.stderr


def _cuda_visible() -> bool:
    probe = [sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"]
    return subprocess.run(probe, capture_output=True, timeout=120).returncode == 0


def test_profile_device_cuda_without_a_gpu_exits_2(
    tmp_path: Path, peaks_cache: Path, write_suite: Callable[[str, str], Path]
) -> None:
    suite = write_suite("ok", SMALL_MATH)
    args = profile_args(suite, tmp_path, peaks_cache)
    args[args.index("cpu")] = "cuda"
    proc = run(args, script=True)
    if proc.returncode == 0 and _cuda_visible():
        pytest.skip("this machine has a CUDA device")
    assert proc.returncode == 2, proc.stderr
    assert "--device cuda: no CUDA device is visible" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_profile_counters_ncu_on_cpu_exits_2_naming_what_is_missing(
    tmp_path: Path, peaks_cache: Path, write_suite: Callable[[str, str], Path]
) -> None:
    suite = write_suite("ok", SMALL_MATH)
    proc = run(profile_args(suite, tmp_path, peaks_cache, "--counters", "ncu", "--quiet"))
    assert proc.returncode == 2, proc.stderr
    assert "--counters ncu needs a CUDA device" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_report_table_has_the_kernel_columns_and_the_cudnn_kernel() -> None:
    proc = run(["report", str(H200_RESULT), "--format", "table"], script=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "NVIDIA H200" in proc.stdout and "sm_90" in proc.stdout
    assert sum(line.startswith("suite llama7b ") for line in lines) == 1  # printed once, not echoed twice
    headers = [line for line in lines if line.startswith("phase ")]
    assert len(headers) == len(load_result(H200_RESULT).cases)
    for column in KERNEL_COLUMNS:
        assert column in headers[0]
    # the cuDNN forward kernel of sdpa[backend=cudnn,pass=fwd]: all the case's time, compute-bound, 12/64 warps
    start = lines.index(next(line for line in lines if line.startswith("sdpa[backend=cudnn,pass=fwd] ")))
    row = lines[start + 2].split()
    assert row[0] == "fused_attention" and row[1] == CUDNN_FPROP
    # an older document: its kernels do not say where their work came from
    assert row[4] == "µs" and row[5:] == ["100%", "compute", "19%", "53%", "—", "19%"]


def test_report_markdown_is_a_table_per_case() -> None:
    proc = run(["report", str(H200_RESULT), "--format", "markdown"])
    assert proc.returncode == 0, proc.stderr
    header = "| " + " | ".join(KERNEL_COLUMNS) + " |"
    doc = load_result(H200_RESULT)
    assert proc.stdout.count(header) == len(doc.cases)
    assert all(f"## {c.id}" in proc.stdout for c in doc.cases)
    assert f"| fused_attention | {CUDNN_FPROP} | 1 |" in proc.stdout


def test_report_writes_durations_past_10_ms_in_ms_with_their_unit() -> None:
    # a CPU run: naive[pass=fwd_bwd] takes 219,928.7 µs; the mask kernel aten::tril of a math case 11,071 µs
    proc = run(["report", str(CPU_RESULT), "--format", "markdown"])
    assert proc.returncode == 0, proc.stderr
    assert "## naive[pass=fwd_bwd]\n\nbackend eager; 219.9 ms [214.4–222.4 ms]" in proc.stdout
    assert "| mask | aten::tril | 1 | 11.1 ms | 89% |" in proc.stdout
    assert "545.9 µs [461.0 µs–20.0 ms]" in proc.stdout  # below 10 ms: µs; a spread across the two units
    # no exponent notation, but in the accuracy's relative error, whose natural form it is
    assert not re.search(r"\de[+-]\d", re.sub(r"accuracy [^;\n]*", "", proc.stdout))


def test_report_json_is_the_document() -> None:
    proc = run(["report", str(H200_RESULT), "--format", "json"], script=True)
    assert proc.returncode == 0, proc.stderr
    assert parse_result(json.loads(proc.stdout)) == load_result(H200_RESULT)


def test_report_of_a_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "attnprof.result/v0"}')
    proc = run(["report", str(bad)], script=True)
    assert proc.returncode == 2
    assert "schema is 'attnprof.result/v0', expected 'attnprof.result/v1'" in proc.stderr


def test_schema_result_prints_the_json_schema() -> None:
    proc = run(["schema", "result"], script=True)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == result_json_schema()
    jsonschema.Draft202012Validator(schema).validate(json.loads(H200_RESULT.read_text()))
    proc = run(["schema", "comparison"])
    assert proc.returncode == 0 and json.loads(proc.stdout) == comparison_json_schema()


def test_attnprof_help_lists_the_verbs() -> None:
    proc = run(["--help"], script=True)
    assert proc.returncode == 0
    for verb in ("profile", "report", "compare", "changepoints", "schema"):
        assert f"  {verb} " in proc.stdout
    assert run([], script=True).returncode == 2
    unknown = run(["profiel"], script=True)
    assert unknown.returncode == 2 and "unknown verb 'profiel'" in unknown.stderr


@pytest.mark.parametrize("script", [True, False])
def test_the_paired_verb_is_listed_once_with_its_alias(script: bool) -> None:
    """``paired`` is the verb's name and ``ab`` its alias: help lists the one with the other in its line, and both
    answer ``--help`` as the same command (the runs themselves: tests/core/test_measure_paired.py)."""
    listed = run(["--help"], script=script)
    assert listed.returncode == 0
    lines = [line for line in listed.stdout.splitlines() if re.search(r"\b(paired|ab)\b", line)]
    assert len(lines) == 1 and re.search(r"\bpaired\s+Profile .*two source trees.*\(alias: ab\)", lines[0]), lines
    helps = [run([verb, "--help"], script=script) for verb in ("paired", "ab")]
    assert [h.returncode for h in helps] == [0, 0], [h.stderr for h in helps]
    for verb, h in zip(("paired", "ab"), helps, strict=True):
        assert f" {verb} [OPTIONS] " in h.stdout and "(alias: ab)" in h.stdout
        assert "(default: attnprof-paired; attnprof-ab when typed as ab)" in h.stdout


NO_TORCH = """
import sys
from attnprof.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("torch", "triton", "numpy", "fastapi", "sqlalchemy") if m in sys.modules)
print("EXIT", code, "HEAVY", ",".join(heavy) or "-", file=sys.stderr)
"""


@pytest.mark.parametrize("verb", [["report", str(H200_RESULT)], ["schema", "result"]])
def test_report_and_schema_do_not_import_torch(verb: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH, *verb], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.stderr.strip().splitlines()[-1] == "EXIT 0 HEAVY -", proc.stderr


@pytest.mark.parametrize(("load_torch", "code"), [(True, 3), (True, None), (True, "bad input"), (False, 3)])
def test_a_profiling_process_ends_without_torchs_teardown(load_torch: bool, code: object) -> None:
    """Once torch is loaded, ``exit_with`` ends the process at once (no atexit handlers: torch's teardown is
    where they run), with the command's exit code and its output flushed; without torch it exits as usual."""
    script = "\n".join(
        [
            "import atexit, sys",
            "import torch" if load_torch else "",
            "from attnprof.core.process_exit import exit_with",
            "atexit.register(lambda: print('teardown ran'))",
            "def command():",
            "    print('result written', end='')",  # no newline: still flushed
            f"    sys.exit({code!r})",
            "exit_with(command)",
        ]
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    expected = {3: 3, None: 0, "bad input": 1}[code]  # type: ignore[index]
    assert proc.returncode == expected, proc.stderr
    assert proc.stdout.startswith("result written")
    assert ("teardown ran" in proc.stdout) is not load_torch
    if code == "bad input":
        assert "bad input" in proc.stderr


def test_a_profiling_process_takes_the_processes_it_started_with_it(tmp_path: Path) -> None:
    """Compile workers and their pools (here: a child and a grandchild that would sleep a minute) end with the
    profiling process instead of outliving it."""
    sleeper = "import time; time.sleep(60)"
    inner = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleeper!r}]); time.sleep(60)"
    script = "\n".join(
        [
            "import subprocess, sys, time, torch",
            "from attnprof.core.process_exit import exit_with",
            f"subprocess.Popen([sys.executable, '-c', {inner!r}])",
            "time.sleep(1.0)",  # both started
            "exit_with(lambda: sys.exit(0))",
        ]
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    assert proc.wait(timeout=120) == 0
    time.sleep(0.5)  # what was killed is gone by then
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    # Killed, they wait as zombies for whoever adopted them to reap them (not every container's init does).
    assert [pid for pid in left if _state(pid) not in ("Z", "gone")] == []


def _state(pid: str) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2]


def test_attnprof_main_called_in_process_returns_to_its_caller(
    tmp_path: Path, peaks_cache: Path, write_suite: Callable[[str, str], Path]
) -> None:
    """Only the console script's profiling process ends at once: ``main(argv)`` raises ``SystemExit`` as usual."""
    from attnprof.cli import main

    suite = write_suite("inproc", SMALL_MATH)
    with pytest.raises(SystemExit) as ended:
        main(profile_args(suite, tmp_path, peaks_cache, "--quiet"))
    assert ended.value.code in (0, None)
    assert (tmp_path / "out" / "result.json").exists()
