"""The GitHub tests' fixture: ``github``, a stand-in for GitHub's REST API (``tests.server.github.fakegithub``) on a
free port. The database, settings and tenants come from ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.github.fakegithub import FakeGitHub


@pytest.fixture(name="github")
def github_fixture() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake
