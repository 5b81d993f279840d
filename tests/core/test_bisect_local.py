"""``attnprof bisect`` over a real git history on the CPU: sixteen commits of a small project, one of which makes its
attention step three times slower; each probe a real paired run of two commits' trees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from attnprof.core.measure.bisect_local import BisectInputError, LocalBisect, commits_between

pytestmark = pytest.mark.slow

SUITE = """[suite]
name = "history"

[suite.timing]
warmup = 3
min_samples = 10
max_samples = 60
budget_s = 0.2
rounds = 2

[[cases]]
name = "step"
target = "histpkg.attn:make_case"
dtype = "fp32"
"""

TARGET = """import torch
import torch.nn.functional as F

REPEATS = {repeats}


def make_case(params, device):
    q = torch.randn(1, 8, 512, 64, device=device)

    def fn(q):
        out = q
        for _ in range(REPEATS):
            out = F.scaled_dot_product_attention(q, q, out)
        return out

    return {{"fn": fn, "args": (q,)}}
"""


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env={**env, "PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def make_history(repo: Path, culprit: int, commits: int = 16) -> list[str]:
    """``commits`` commits after a first good one; commit ``culprit`` (1-based) repeats the attention three times."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "histpkg").mkdir()
    (repo / "histpkg" / "__init__.py").write_text("")
    (repo / "perf.toml").write_text(SUITE)
    shas = []
    for i in range(commits + 1):
        (repo / "histpkg" / "attn.py").write_text(TARGET.format(repeats=3 if 0 < culprit <= i else 1))
        (repo / "NOTES").write_text(f"change {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return shas


def test_a_threefold_slowdown_in_sixteen_commits_is_found_and_confirmed_in_five_paired_probes(tmp_path: Path) -> None:
    shas = make_history(tmp_path / "repo", culprit=11)
    assert commits_between(tmp_path / "repo", shas[0], shas[-1]) == shas
    lines: list[str] = []
    job = LocalBisect(
        repo=tmp_path / "repo",
        good=shas[0],
        bad="main",
        suite=Path("perf.toml"),
        out=tmp_path / "out",
        device="cpu",
        cache_dir=tmp_path / "cache",
    )
    found = job.run(say=lines.append)
    assert found.status() == "confirmed", "\n".join(lines)
    assert found.culprit == shas[11]
    # the step measured first (locally there is no alert to give it), then at most log2(16) + 1
    assert len(found.probes) <= found.budget == 5, "\n".join(lines)
    assert lines[0].startswith("measuring the step")
    written = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert written["status"] == "confirmed" and written["culprit"] == shas[11]
    assert len(written["probes"]) == len(found.probes) + 1


def test_refs_that_are_not_a_range_are_refused(tmp_path: Path) -> None:
    shas = make_history(tmp_path / "repo", culprit=0, commits=2)
    with pytest.raises(BisectInputError, match="not an ancestor"):
        commits_between(tmp_path / "repo", shas[2], shas[0])
    with pytest.raises(BisectInputError, match="no commits between"):
        commits_between(tmp_path / "repo", shas[1], shas[1])
    with pytest.raises(BisectInputError, match="rev-parse"):
        commits_between(tmp_path / "repo", "no-such-ref", shas[1])


def test_the_command_refuses_bad_input_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from attnprof.cli import main

    shas = make_history(tmp_path / "repo", culprit=0, commits=1)
    repo = str(tmp_path / "repo")
    for argv, words in (
        (["--good", shas[1], "--bad", shas[0]], "not an ancestor"),
        (["--good", shas[0], "--bad", shas[1], "--effect", "-0.5"], "--effect/--low/--high"),
        (["--good", shas[0], "--bad", shas[1], "--low", "0.1"], "--low and --high come with --effect"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["bisect", "perf.toml", "--repo", repo, "--out", str(tmp_path / "o"), "--device", "cpu", *argv])
        assert exit_.value.code == 2 and words in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["bisect", "nope.toml", "--repo", repo, "--good", shas[0], "--bad", shas[1], "--device", "cpu"])
    assert exit_.value.code == 2 and "nope.toml: no such suite file" in capsys.readouterr().err
