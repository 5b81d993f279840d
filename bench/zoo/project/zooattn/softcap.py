"""The soft-capped softmax of the eager attention path (logits squashed by ``cap * tanh(x / cap)`` before the
softmax), compiled with torch.compile."""

from __future__ import annotations

from typing import Any

import torch

from . import _common

SOFTCAP = 50.0
# Inductor's tuning: max-autotune also searches the reduction kernels' block sizes (coordinate descent).
COMPILE_MODE = "max-autotune-no-cudagraphs"

_compiled: dict[str, Any] = {}


def softcap_softmax(scores: torch.Tensor) -> torch.Tensor:
    capped = torch.tanh(scores.float() / SOFTCAP) * SOFTCAP
    return torch.softmax(capped, dim=-1).to(scores.dtype)


def reference(scores: torch.Tensor) -> torch.Tensor:
    return torch.softmax(torch.tanh(scores / SOFTCAP) * SOFTCAP, dim=-1)


def compiled_softmax(scores: torch.Tensor) -> torch.Tensor:
    fn = _compiled.get(COMPILE_MODE)
    if fn is None:
        fn = _compiled[COMPILE_MODE] = torch.compile(softcap_softmax, mode=COMPILE_MODE)
    return fn(scores)  # type: ignore[no-any-return]


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory: the score matrix of ``args.heads`` heads over ``args.seq`` tokens, ``batch`` prompts."""
    b, h, s = params["batch"], params["args"]["heads"], params["args"]["seq"]
    scores = _common.randn((b, h, s, s), device=device, dtype=_common.dtype_of(params), gen=_common.generator(device))
    return {"fn": compiled_softmax, "args": (scores,), "reference": reference}
