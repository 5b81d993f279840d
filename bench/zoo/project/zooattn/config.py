"""The model's attention geometry: the width is fixed by the checkpoint, the split into heads is ours."""

from __future__ import annotations

MODEL_WIDTH = 2560
HEAD_DIM = 64
HEADS = MODEL_WIDTH // HEAD_DIM
