"""Faults during a run: each is recorded on its case with its reason, and the next case still runs.

Custom targets are real modules written to a temporary directory and imported by the runner; the
PyTorch errors are PyTorch's own (an SDPA backend refusing a shape on the CPU), except the GPU
out-of-memory error, which a CPU cannot produce and a factory raises as CUDA would.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import jsonschema
import pytest
import torch

from attnprof.core.documents import Case, ResultDocument, parse_result, result_json_schema
from attnprof.core.errors import CountersUnavailable, DeviceError
from attnprof.core.measure.accuracy import NON_FINITE_ERROR, check_accuracy
from attnprof.core.measure.case import _with_reasons
from attnprof.core.measure.runner import ProfileOptions, profile_suite, resolve_device
from attnprof.core.suite import parse_suite
from tests.profiling_support import suite_text

MODULE = "attnprof_test_factories"

FACTORIES = '''
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SEEN = []


def attention(params, device):
    """Attention through SDPA on (q, k, v) that need gradients, with a float64 reference."""
    SEEN.append((params, device))
    b, h, s, d = params["batch"], params["q_heads"], params["seq_q"], params["head_dim"]
    gen = torch.Generator(device=device).manual_seed(params["args"]["seed"])
    q, k, v = (torch.randn(b, h, s, d, generator=gen, device=device, requires_grad=True) for _ in range(3))
    scale = params["args"]["scale"]

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=scale)

    def reference(q, k, v):
        assert q.dtype == torch.float64
        return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v

    return fn, [q, k, v], reference


def raises(params, device):
    raise ValueError(f"block_n must divide seq_q, got {params['args']['block_n']}")


def flash_without_gqa(params, device):
    """Forces the flash backend on GQA inputs without enable_gqa: PyTorch refuses and says why."""
    q = torch.randn(1, 4, 16, 8, device=device)
    k = torch.randn(1, 2, 16, 8, device=device)

    def fn(q, k, v):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    return fn, [q, k, k.clone()]


def out_of_memory(params, device):
    x = torch.randn(4, 4, device=device)

    def fn(x):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total capacity of 139.81 GiB\\n"
            "of which 12.00 MiB is free."
        )

    return fn, [x]


def wrong_reference(params, device):
    x = torch.randn(4, 4, device=device)
    return (lambda x: x * 2), [x], (lambda x: x[:2] * 2)


def not_finite(params, device):
    x = torch.randn(4, 4, device=device)
    return (lambda x: x * math.nan), [x], (lambda x: x * 2)


def not_a_function(params, device):
    return "fn", []
'''

CASES = f"""
[[cases]]
name = "noimport"
target = "nosuchpkg.mod:factory"

[[cases]]
name = "raises"
target = "{MODULE}:raises"
args = {{ block_n = 3 }}

[[cases]]
name = "ineligible"
target = "{MODULE}:flash_without_gqa"
dtype = "fp32"

[[cases]]
name = "oom"
target = "{MODULE}:out_of_memory"
dtype = "fp32"

[[cases]]
name = "after_oom"
target = "naive"
q_heads = 2
seq_q = 8
head_dim = 8
dtype = "fp32"

[[cases]]
name = "custom"
target = "{MODULE}:attention"
batch = 1
q_heads = 2
seq_q = 8
head_dim = 8
dtype = "fp32"
pass = "fwd_bwd"
args = {{ seed = 7, scale = 0.25 }}

[[cases]]
name = "wrong_reference"
target = "{MODULE}:wrong_reference"
dtype = "fp32"

[[cases]]
name = "not_finite"
target = "{MODULE}:not_finite"
dtype = "fp32"

[[cases]]
name = "not_a_function"
target = "{MODULE}:not_a_function"
"""

ONE_CASE = '[[cases]]\nname = "a"\ntarget = "naive"\nq_heads = 1\nseq_q = 4\nhead_dim = 4\n'


class Run:
    def __init__(self, doc: ResultDocument, module: ModuleType) -> None:
        self.doc = doc
        self.module = module

    def case(self, case_id: str) -> Case:
        case = self.doc.case(case_id)
        assert case is not None
        return case


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, peaks_cache: Path) -> Iterator[Run]:
    src = tmp_path_factory.mktemp("user-src")
    (src / f"{MODULE}.py").write_text(textwrap.dedent(FACTORIES))
    suite = parse_suite(suite_text("faults", CASES), source="faults.toml")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(src))
        options = ProfileOptions(device="cpu", trace_dir=tmp_path_factory.mktemp("traces"), cache_dir=peaks_cache)
        doc = profile_suite(suite, options)
        module = sys.modules[MODULE]
        yield Run(doc, module)
    sys.modules.pop(MODULE, None)


def test_the_run_goes_on_past_every_fault(run: Run) -> None:
    status = {c.id: c.status for c in run.doc.cases}
    assert status == {
        "noimport": "failed",
        "raises": "failed",
        "ineligible": "failed",
        "oom": "failed",
        "after_oom": "ok",
        "custom": "ok",
        "wrong_reference": "failed",
        "not_finite": "ok",
        "not_a_function": "failed",
    }
    for case in run.doc.cases:
        if case.status == "failed":
            assert case.error is not None and case.error.message
            assert case.latency_us is None and case.kernels == []
        else:
            assert case.error is None


def test_the_document_with_faults_is_valid(run: Run) -> None:
    data = json.loads(run.doc.to_json())
    jsonschema.Draft202012Validator(result_json_schema()).validate(data)
    assert parse_result(data) == run.doc


def test_a_target_that_fails_to_import(run: Run) -> None:
    error = run.case("noimport").error
    assert error is not None and error.type == "ImportError"
    assert "nosuchpkg.mod:factory" in error.message and "No module named 'nosuchpkg'" in error.message


def test_a_factory_that_raises(run: Run) -> None:
    error = run.case("raises").error
    assert error is not None and error.type == "ValueError"
    assert f"{MODULE}:raises raised while building the case" in error.message
    assert "block_n must divide seq_q, got 3" in error.message


def test_a_factory_that_returns_no_function(run: Run) -> None:
    error = run.case("not_a_function").error
    assert error is not None and error.type == "TypeError" and "(fn, args)" in error.message


def test_a_backend_not_eligible_fails_with_pytorchs_reason(run: Run) -> None:
    error = run.case("ineligible").error
    assert error is not None and error.type == "RuntimeError"
    lines = error.message.splitlines()
    assert lines[0].startswith("No available kernel")
    # the reason PyTorch gives only in a warning before the error, without its C++ source location
    assert any("same num_heads" in line for line in lines[1:]), lines
    assert "Triggered internally" not in error.message


def test_out_of_memory_fails_that_case_only(run: Run) -> None:
    error = run.case("oom").error
    assert error is not None and error.type == "OutOfMemoryError"
    assert error.message == "CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    after = run.case("after_oom")
    assert after.backend_used == "eager" and after.latency_us is not None and after.accuracy is not None
    assert after.accuracy.ok


def test_a_custom_target_gets_its_params_and_runs_forward_and_backward(run: Run) -> None:
    case = run.case("custom")
    ((params, device),) = run.module.SEEN
    assert device == "cpu"
    assert params == case.params and params["args"] == {"seed": 7, "scale": 0.25}
    assert case.backend_used == "cpu_flash"
    assert any(k.phase == "backward" for k in case.kernels)
    # the shape is given, so the FLOPs follow the attention formula: 4·B·Hq·Sq·Skv·D × 3.5
    assert case.work is not None and case.work.flops == 4 * 1 * 2 * 8 * 8 * 8 * 3.5
    acc = case.accuracy
    assert acc is not None and acc.ok and acc.rel_l2_err < 1e-5
    assert acc.reference.startswith(f"the reference returned by {MODULE}:attention")
    assert acc.grads is not None and {g.tensor for g in acc.grads} == {"darg0", "darg1", "darg2"}
    assert all(g.ok for g in acc.grads)


def test_a_reference_of_another_shape_fails_the_case(run: Run) -> None:
    error = run.case("wrong_reference").error
    assert error is not None and error.type == "ValueError"
    assert "(4, 4)" in error.message and "(2, 4)" in error.message


def test_a_non_finite_output_fails_accuracy_and_stays_valid_json(run: Run) -> None:
    acc = run.case("not_finite").accuracy
    assert acc is not None and not acc.ok
    assert acc.rel_l2_err == acc.max_abs_err == NON_FINITE_ERROR
    text = run.doc.to_json()
    assert "NaN" not in text and "Infinity" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_device_cuda_without_a_gpu_is_refused_before_anything_runs(peaks_cache: Path) -> None:
    with pytest.raises(DeviceError, match="no CUDA device is visible") as info:
        resolve_device("cuda")
    assert "--device cpu" in str(info.value)
    suite = parse_suite(suite_text("s", ONE_CASE))
    with pytest.raises(DeviceError):
        profile_suite(suite, ProfileOptions(device="cuda", cache_dir=peaks_cache))


def test_device_names_are_checked() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(DeviceError, match="auto, cpu or cuda"):
        resolve_device("gpu")


def test_counters_on_cpu_are_refused_before_anything_runs(peaks_cache: Path) -> None:
    suite = parse_suite(suite_text("s", ONE_CASE))
    with pytest.raises(CountersUnavailable, match="needs a CUDA device"):
        profile_suite(suite, ProfileOptions(device="cpu", counters="ncu", cache_dir=peaks_cache))
    with pytest.raises(DeviceError, match="none, ncu or cached"):
        profile_suite(suite, ProfileOptions(device="cpu", counters="nsys", cache_dir=peaks_cache))


def test_with_reasons_keeps_the_eligibility_warnings_only() -> None:
    warnings = [
        "Memory efficient kernel not used because: (Triggered internally at /src/sdp_utils.cpp:885.)",
        "Flash attention only supports dtypes fp16 and bf16 (Triggered internally at /src/sdp_utils_cpp.h:241.)",
        "Both fused kernels do not support non-zero dropout. (Triggered internally at /src/sdp_utils_cpp.h:99.)",
        "Both fused kernels do not support non-zero dropout. (Triggered internally at /src/sdp_utils_cpp.h:99.)",
        "torch.compile is slow on this machine",
    ]
    text = _with_reasons(RuntimeError(" No available kernel.  Aborting execution. "), warnings)
    assert text.splitlines() == [
        "No available kernel.  Aborting execution.",
        "Memory efficient kernel not used because:",
        "Flash attention only supports dtypes fp16 and bf16",
        "Both fused kernels do not support non-zero dropout.",
    ]
    assert _with_reasons(ValueError("plain"), ["unrelated"]) == "plain"


@pytest.mark.parametrize(
    ("output", "reference"),
    [
        (torch.ones(3), torch.full((3,), float("nan"))),  # a reference that went wrong
        (torch.full((3,), float("inf")), torch.ones(3)),
        (torch.full((3,), 1e300, dtype=torch.float64), torch.zeros(3)),  # finite, but the norm overflows
    ],
    ids=["nan-reference", "inf-output", "overflow"],
)
def test_accuracy_errors_stay_finite_numbers(output: torch.Tensor, reference: torch.Tensor) -> None:
    acc = check_accuracy({"out": output}, {"out": reference}, dtype="fp32")
    assert not acc.ok and acc.rel_l2_err == NON_FINITE_ERROR
    accuracy_schema = {"$defs": result_json_schema()["$defs"], "$ref": "#/$defs/Accuracy"}
    jsonschema.Draft202012Validator(accuracy_schema).validate(json.loads(acc.model_dump_json()))


def test_accuracy_refuses_a_reference_that_is_not_a_tensor() -> None:
    with pytest.raises(TypeError, match="'dq' is a tuple, not a tensor"):
        check_accuracy({"out": torch.ones(2), "dq": torch.ones(2)}, {"out": torch.ones(2), "dq": (1, 2)}, dtype="fp32")
