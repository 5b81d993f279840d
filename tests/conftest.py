"""Fixtures for the tests that profile on the CPU; their helpers live in ``profiling_support``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from profiling_support import suite_text


@pytest.fixture(scope="session")
def peaks_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One peaks cache for the session: the host calibration (a 256 MiB copy, matmuls) runs once."""
    return tmp_path_factory.mktemp("peaks-cache")


@pytest.fixture
def write_suite(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``suite_text(name, cases)`` to ``tmp_path/<name>.toml`` and return its path."""

    def write(name: str, cases: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(suite_text(name, cases))
        return path

    return write
