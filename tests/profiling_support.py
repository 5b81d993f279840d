"""Helpers shared by the tests that profile on the CPU (real torch, tiny shapes, short timing loops).

A plain module: tests import helpers from here, never from a conftest (``tests/server`` has a
conftest of its own, and two modules named ``conftest`` shadow each other on the path).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# Timing of every suite these tests profile: a handful of samples, so a case costs a fraction of a
# second on a shared 2-core machine. The numbers are not the point; the pipeline around them is.
TINY_TIMING = """\
[suite.timing]
warmup = 1
min_samples = 3
max_samples = 5
budget_s = 0.05
trace_iters = 1
"""


def suite_text(name: str, cases: str) -> str:
    """A suite file: ``[suite]`` named ``name`` with the tiny timing, then ``cases`` (TOML)."""
    return f'[suite]\nname = "{name}"\n\n{TINY_TIMING}\n{cases}'


def tar_gz(files: dict[str, bytes]) -> bytes:
    """A gzipped tar of ``files`` (path in the archive -> bytes): a job's source bundle."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
