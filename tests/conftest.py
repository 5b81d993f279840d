"""Fixtures shared by the tests that profile on the CPU (real torch, tiny shapes, short timing loops)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def peaks_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One peaks cache for the session: the host calibration (a 256 MiB copy, matmuls) runs once."""
    return tmp_path_factory.mktemp("peaks-cache")


def suite_text(name: str, cases: str) -> str:
    """A suite file: ``[suite]`` named ``name`` with the tiny timing, then ``cases`` (TOML)."""
    return f'[suite]\nname = "{name}"\n\n{TINY_TIMING}\n{cases}'


@pytest.fixture
def write_suite(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``suite_text(name, cases)`` to ``tmp_path/<name>.toml`` and return its path."""

    def write(name: str, cases: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(suite_text(name, cases))
        return path

    return write
