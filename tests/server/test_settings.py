"""Secrets that are placeholders are refused at start, by the server's settings and the GPU worker's alike."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from attnprof.server.config import Settings
from attnprof.worker.profile.settings import GpuWorkerSettings


@pytest.mark.parametrize("word", ["changeme", " Secret ", "TODO"])
def test_a_placeholder_secret_is_refused_naming_the_setting(word: str) -> None:
    with pytest.raises(ValidationError, match=r"github_token[\s\S]*is a placeholder"):
        Settings(github_token=word)
    with pytest.raises(ValidationError, match=r"worker_token[\s\S]*is a placeholder"):
        GpuWorkerSettings(worker_token=word)


def test_a_real_secret_is_kept() -> None:
    secret = "ap_" + "x" * 40
    assert Settings(github_token=secret).github_token.get_secret_value() == secret  # type: ignore[union-attr]
    assert GpuWorkerSettings(worker_token=secret).worker_token.get_secret_value() == secret  # type: ignore[union-attr]
