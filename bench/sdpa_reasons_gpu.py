"""Why SDPA refused a backend, as the profiler reports it, against PyTorch asked directly: recorded on a GPU host.

    python -m bench.sdpa_reasons_gpu --out DIR      # a GPU host; writes DIR/sdpa-reasons.json

Each call below is one a user's code makes (an all-true boolean mask, a float mask, head dimension 256, dropout in
training, a transposed key, GQA without ``enable_gqa``, fp32, ...). For each, the call runs once under the profiler
with ``record_shapes`` as a case's traced iteration does; the profiler's path then reads the call back from the trace
(``attnprof.core.attribution.sdpa_calls``) and asks PyTorch about the rebuilt call
(``attnprof.core.measure.sdpa_reasons``). The truth beside it: ``torch.backends.cuda.can_use_*_attention`` asked about
the real tensors, and the backend whose kernels ran (``attnprof.core.attribution.backends``). The file keeps each
call's trace event, both answers and the backend that ran, so that ``tests/core/test_sdpa_reasons.py`` checks on the
CPU that the trace is read into the call PyTorch saw and that the comparison says PyTorch's reasons.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from attnprof.core.attribution.backends import detect_backend
from attnprof.core.attribution.kineto import parse_trace
from attnprof.core.attribution.sdpa_calls import SDPA_OP, sdpa_calls
from attnprof.core.documents.result import SDPA_FUSED
from attnprof.core.measure.environment import software_versions
from attnprof.core.measure.sdpa_reasons import ask_backends, reasons_of

Call = Callable[[], torch.Tensor]


def _qkv(b: int, hq: int, hkv: int, s: int, skv: int, d: int, dtype: torch.dtype, grad: bool = False) -> list[Any]:
    def t(h: int, n: int) -> torch.Tensor:
        return torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=grad)

    return [t(hq, s), t(hkv, skv), t(hkv, skv)]


def calls() -> dict[str, tuple[list[Any], dict[str, Any], bool]]:
    """name -> (q, k, v and a mask or None; the keyword arguments; whether it trains)."""
    bf = torch.bfloat16
    q, k, v = _qkv(2, 16, 16, 1024, 1024, 128, bf)
    qt, kt, vt = _qkv(2, 16, 16, 1024, 1024, 128, bf, grad=True)
    gq, gk, gv = _qkv(1, 32, 8, 1, 4096, 128, bf)
    s = 1024
    return {
        "plain": ([q, k, v, None], {}, False),
        "causal": ([q, k, v, None], {"is_causal": True}, False),
        "all-true-bool-mask": ([q, k, v, torch.ones(s, s, device="cuda", dtype=torch.bool)], {}, False),
        "float-mask": ([q, k, v, torch.zeros(1, 1, s, s, device="cuda", dtype=bf)], {}, False),
        "head-dim-256": ([*_qkv(2, 16, 16, 1024, 1024, 256, bf), None], {}, False),
        "head-dim-512": ([*_qkv(1, 8, 8, 512, 512, 512, bf), None], {}, False),
        "head-dim-80": ([*_qkv(2, 16, 16, 77, 1024, 80, torch.float16), None], {}, False),
        "dropout-training": ([qt, kt, vt, None], {"dropout_p": 0.1}, True),
        "transposed-key": ([q, k.transpose(-1, -2).contiguous().transpose(-1, -2), v, None], {}, False),
        "gqa-without-enable-gqa": ([gq, gk, gv, None], {}, False),
        "gqa-enable-gqa": ([gq, gk, gv, None], {"enable_gqa": True}, False),
        "fp32": ([*_qkv(2, 16, 16, 1024, 1024, 64, torch.float32), None], {}, False),
        "causal-decode": ([*_qkv(8, 32, 32, 1, 2048, 128, bf), None], {"is_causal": True}, False),
    }


def _direct(args: list[Any], kwargs: dict[str, Any]) -> dict[str, list[str] | None]:
    """PyTorch's own answer for the real tensors: None where a backend takes the call, else its reasons."""
    q, k, v, mask = args
    params = torch.backends.cuda.SDPAParams(
        q, k, v, mask, kwargs.get("dropout_p", 0.0), kwargs.get("is_causal", False), kwargs.get("enable_gqa", False)
    )
    out: dict[str, list[str] | None] = {}
    for backend in SDPA_FUSED:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = getattr(torch.backends.cuda, f"can_use_{backend}_attention")(params, True)
        out[backend] = None if ok else reasons_of([str(w.message) for w in caught])
    return out


def record(name: str, args: list[Any], kwargs: dict[str, Any], trains: bool, folder: Path) -> dict[str, Any]:
    q, k, v, mask = args
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)  # warm: the first call compiles nothing here
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)
        if trains:
            out.sum().backward()  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()
    path = folder / f"{name}.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    parsed = parse_trace(trace)
    found = sdpa_calls(parsed)
    asked = ask_backends(found, device="cuda", requires_grad=trains)
    event = next(e for e in trace["traceEvents"] if e.get("name") == SDPA_OP)
    return {
        "name": name,
        "trains": trains,
        "event_args": {
            key: event["args"][key]
            for key in ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
            if key in event["args"]
        },
        "backend_ran": detect_backend([kk.name for kk in parsed.kernels], [op.name for op in parsed.ops]),
        "profiler": [c.model_dump(mode="json") for c in asked],
        "direct": _direct(args, kwargs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    out_dir: Path = parser.parse_args().out
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (args, kwargs, trains) in calls().items():
            try:
                row = record(name, args, kwargs, trains, Path(tmp))
            except Exception as exc:  # a call this GPU or PyTorch cannot make is recorded, not fatal
                row = {"name": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            rows.append(row)
            same = row.get("profiler") and all(
                (row["direct"][b] is None) == (b in (row["profiler"][0].get("eligible") or [])) for b in SDPA_FUSED
            )
            print(f"{name}: ran {row.get('backend_ran')}, profiler agrees with PyTorch: {bool(same)}", flush=True)
    document = {
        "gpu": torch.cuda.get_device_name(),
        "versions": software_versions(),
        "command": "python -m bench.sdpa_reasons_gpu --out DIR",
        "calls": rows,
    }
    (out_dir / "sdpa-reasons.json").write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out_dir / 'sdpa-reasons.json'}")


if __name__ == "__main__":
    main()
