"""Source for any commit through GitHub's compare and tarball endpoints, against a stand-in that follows GitHub's
documentation: the range oldest first and paged, a tarball behind a 302 with one top folder and a pax header (made by
``git archive``, as GitHub's are), 404 for a commit force-pushed away, rate limits retried, and a tarball that breaks a
bundle's rules refused."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from attnprof.server.github.client import GitHubClient
from attnprof.server.github.source import SourceError, commits_between, fetch_tree
from tests.server.github.fakegithub import SERVICE_TOKEN, FakeGitHub

REPO = "acme/kernels"


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, env={**env, "PATH": "/usr/bin:/bin"}, check=True
    )
    return done.stdout.decode().strip()


def history(tmp_path: Path, github: FakeGitHub, n: int) -> list[str]:
    """``n + 1`` real commits, each served by the stand-in with the tarball ``git archive`` makes of it."""
    repo = tmp_path / "src"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas: list[str] = []
    for i in range(n + 1):
        (repo / "kernel.py").write_text(f"SCALE = {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {i}\n\nbody")
        sha = _git(repo, "rev-parse", "HEAD")
        prefix = f"acme-kernels-{sha[:7]}/"
        tarball = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar.gz", f"--prefix={prefix}", sha],
            capture_output=True,
            check=True,
        ).stdout
        github.add_commit(REPO, sha, (shas[-1],) if shas else (), f"change {i}\n\nbody", tarball)
        shas.append(sha)
    return shas


def client(github: FakeGitHub) -> GitHubClient:
    return GitHubClient(github.url, SERVICE_TOKEN, backoff_s=0.0, sleep=lambda _: None)


def test_the_range_comes_oldest_first_across_pages(tmp_path: Path, github: FakeGitHub) -> None:
    shas = history(tmp_path, github, 130)  # more than one page of 100
    with client(github) as gh:
        commits = commits_between(gh, REPO, shas[0], shas[-1])
    assert [c.sha for c in commits] == shas[1:]
    assert commits[0].parents == (shas[0],) and commits[0].message == "change 1" and not commits[0].is_merge
    pages = [r for r in github.state.requests if "/compare/" in r.path]
    assert len(pages) == 2


def test_a_range_that_is_not_ahead_or_a_commit_that_is_gone_is_said(tmp_path: Path, github: FakeGitHub) -> None:
    shas = history(tmp_path, github, 3)
    with client(github) as gh:
        with pytest.raises(SourceError, match="is not ahead of"):
            commits_between(gh, REPO, shas[3], shas[1])
        with pytest.raises(SourceError, match="at most 2"):
            commits_between(gh, REPO, shas[0], shas[3], limit=2)
        github.state.gone.add(shas[2])
        with pytest.raises(SourceError, match="force-pushed"):
            commits_between(gh, REPO, shas[0], shas[2])
        with pytest.raises(SourceError, match="no such commit"):
            fetch_tree(gh, REPO, shas[2], tmp_path / "gone")


def test_a_commits_tree_is_fetched_through_the_redirect_once_and_rate_limits_are_waited_out(
    tmp_path: Path, github: FakeGitHub
) -> None:
    shas = history(tmp_path, github, 2)
    github.fail_next("rate429")
    with client(github) as gh:
        tree = fetch_tree(gh, REPO, shas[1], tmp_path / "trees" / shas[1])
        assert (tree / "kernel.py").read_text() == "SCALE = 1\n"
        assert gh.retries == 1
        again = fetch_tree(gh, REPO, shas[1], tmp_path / "trees" / shas[1])
    assert again == tree
    fetched = [r.path for r in github.state.requests if "tarball" in r.path or "_codeload" in r.path]
    assert fetched == [f"/repos/{REPO}/tarball/{shas[1]}"] * 2 + [f"/_codeload/{REPO}/legacy.tar.gz/{shas[1]}"]
    codeload = next(r for r in github.state.requests if r.path.startswith("/_codeload/"))
    assert codeload.headers.get("Authorization", "").startswith("Bearer ")  # same host here: GitHub's own address


def _tar(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))
    return gzip.compress(raw.getvalue())


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([("top/../../escape.py", b"x", None)], "leaves the bundle"),
        ([("top/link", None, "/etc/passwd")], "is a link"),
        ([("a.py", b"x", None), ("b.py", b"y", None)], "one top folder"),
    ],
)
def test_a_tarball_that_breaks_a_bundles_rules_is_refused(
    tmp_path: Path, github: FakeGitHub, members: list[tuple[str, bytes | None, str | None]], words: str
) -> None:
    sha = "ab" * 20
    github.add_commit(REPO, sha, (), "hostile", _tar(members))
    with client(github) as gh, pytest.raises(SourceError, match=words):
        fetch_tree(gh, REPO, sha, tmp_path / "tree")
    assert not (tmp_path / "tree").exists() and not (tmp_path / "escape.py").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing left of the staging folder
