"""Accuracy: every case's output (and gradients) against a float64 reference of the same function."""

from __future__ import annotations

import sys

import torch

from attnprof.core.documents import Accuracy, TensorAccuracy

# Relative L2 error allowed per input dtype. bf16 operands land between 1e-3 and 1e-2 against a
# float64 reference, fp16 about 8x lower (3 more mantissa bits); fp32 far under 1e-3 unless a
# backend uses TF32 (~3e-4). The margins catch wrong results, not rounding.
FORWARD_TOLERANCE = {"fp32": 1e-3, "fp16": 5e-3, "bf16": 2e-2}
# Gradients go through more roundings (and accumulate in the input dtype on some backends).
GRAD_FACTOR = 2.5
# JSON has no infinity (pydantic would write null, which the schema rejects): an output that holds
# NaN or inf is recorded with the largest finite error, so it fails every tolerance and stays valid.
NON_FINITE_ERROR = sys.float_info.max


def _errors(name: str, value: torch.Tensor, ref: object) -> tuple[float, float]:
    if not isinstance(ref, torch.Tensor):
        raise TypeError(f"the reference for {name!r} is a {type(ref).__name__}, not a tensor")
    if tuple(value.shape) != tuple(ref.shape):
        # Broadcasting would compare the wrong elements and report a meaningless error.
        raise ValueError(f"{name!r} has shape {tuple(value.shape)} but its reference {tuple(ref.shape)}")
    v, r = value.double(), ref.double().to(value.device)
    diff = v - r  # NaN or inf wherever the output or the reference is not finite
    if not torch.isfinite(diff).all():
        return NON_FINITE_ERROR, NON_FINITE_ERROR
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    norm = float(r.norm())
    rel = float(diff.norm()) / norm if norm > 0 else float(diff.norm())
    return min(max_abs, NON_FINITE_ERROR), min(rel, NON_FINITE_ERROR)


def check_accuracy(
    outputs: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    *,
    dtype: str,
    tolerance: float | None = None,
    reference_name: str = "float64 attention written out (matmul, softmax, matmul)",
) -> Accuracy:
    """Compare ``outputs`` (``out`` and, for fwd_bwd, ``dq``/``dk``/... ) with ``reference``.

    Raises ``TypeError`` or ``ValueError`` when a reference is not a tensor of the output's shape.
    """
    tol = tolerance if tolerance is not None else FORWARD_TOLERANCE[dtype]
    max_abs, rel = _errors("out", outputs["out"], reference["out"])
    grads = []
    for name, value in outputs.items():
        if name == "out" or name not in reference:
            continue
        g_abs, g_rel = _errors(name, value, reference[name])
        g_tol = tol * GRAD_FACTOR
        grads.append(
            TensorAccuracy(tensor=name, max_abs_err=g_abs, rel_l2_err=g_rel, tolerance=g_tol, ok=g_rel <= g_tol)
        )
    ok = rel <= tol and all(g.ok for g in grads)
    return Accuracy(
        reference=reference_name, max_abs_err=max_abs, rel_l2_err=rel, tolerance=tol, ok=ok, grads=grads or None
    )
