"""The submit client: bundles from a source directory, git provenance, exit codes, and what it imports."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from service import client_source
from service.client_cli import EXIT_FAIL, EXIT_NO_VERDICT, EXIT_PASS, exit_code


def _git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return sorted(m.name for m in tar.getmembers())


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("GITHUB_REPOSITORY", "GITHUB_HEAD_REF", "GITHUB_REF_NAME"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "kern.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "attnprof.toml").write_text("[suite]\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "remote", "add", "origin", "git@github.com:acme/kernels.git")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    (root / "pkg" / "two.py").write_text("y = 2\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "two")
    return root


def test_the_bundle_is_what_git_would_track(repo: Path) -> None:
    (repo / "debug.log").write_text("noise")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0" * 100)
    (repo / "pkg" / "new.py").write_text("z = 3\n")  # untracked, not ignored: the user's working copy goes
    (repo / "pkg" / "link.py").symlink_to("/etc/passwd")
    built = client_source.build_bundle(repo)
    assert _names(built.data) == [".gitignore", "attnprof.toml", "pkg/kern.py", "pkg/new.py", "pkg/two.py"]
    assert built.skipped_links == ["pkg/link.py"]
    assert client_source.build_bundle(repo).data == built.data  # deterministic: stored once by the service


def test_outside_git_the_usual_folders_and_gitignore_are_left_out(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    for name in ("pkg/a.py", "pkg/__pycache__/a.cpython-311.pyc", ".venv/lib/x.py", "data/big.npy", "notes.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    (root / ".gitignore").write_text("data/\n*.txt\n")
    assert _names(client_source.build_bundle(root).data) == [".gitignore", "pkg/a.py"]


def test_limits(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(os.urandom(5000))
    with pytest.raises(client_source.SourceError, match="limit"):
        client_source.build_bundle(tmp_path, max_unpacked_bytes=1000)
    with pytest.raises(client_source.SourceError, match="limit"):
        client_source.build_bundle(tmp_path, max_bytes=1000)
    with pytest.raises(client_source.SourceError, match="not a directory"):
        client_source.build_bundle(tmp_path / "missing")


def test_provenance_from_git(repo: Path) -> None:
    main_head = _git(repo, "rev-parse", "HEAD")
    first = _git(repo, "rev-parse", "HEAD~1")
    on_main = client_source.git_info(repo)
    # On the default branch the base is the parent: the run compares with what came before it.
    assert (on_main.commit, on_main.branch, on_main.repo, on_main.base_commit) == (
        main_head,
        "main",
        "acme/kernels",
        first,
    )
    assert on_main.ancestors == [first]
    _git(repo, "checkout", "-q", "-b", "feature")
    (repo / "pkg" / "kern.py").write_text("x = 2\n")
    _git(repo, "commit", "-q", "-am", "faster?")
    on_branch = client_source.git_info(repo)
    assert on_branch.branch == "feature" and on_branch.base_commit == main_head
    assert on_branch.ancestors == [main_head, first]
    given = client_source.git_info(repo, base_commit=first)
    assert given.base_commit == first and given.ancestors == [first]


def test_a_folder_its_checkout_ignores_is_bundled_as_a_plain_folder(repo: Path) -> None:
    # `make demo` copies the demo project under the checkout's ignored out/: git would track none of it.
    source = repo / "build" / "project"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "attn.py").write_text("a = 1\n")
    (source / "attnprof.toml").write_text("[suite]\n")
    (source / "trace.log").write_text("noise")
    (source / ".gitignore").write_text("*.log\n")
    assert _names(client_source.build_bundle(source).data) == [".gitignore", "attnprof.toml", "pkg/attn.py"]
    info = client_source.git_info(source)
    assert (info.commit, info.base_commit, info.ancestors) == (None, None, [])


def test_no_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/k")
    monkeypatch.setenv("GITHUB_HEAD_REF", "")
    monkeypatch.setenv("GITHUB_REF_NAME", "release")
    info = client_source.git_info(tmp_path)
    assert (info.commit, info.branch, info.repo, info.base_commit, info.ancestors) == (
        None,
        "release",
        "acme/k",
        None,
        [],
    )


def test_exit_codes() -> None:
    done = {"status": "done", "reason": None}
    assert exit_code({**done, "verdict": "pass"}, True) == (EXIT_PASS, "verdict: pass")
    assert exit_code({**done, "verdict": "warn"}, True)[0] == EXIT_PASS
    assert exit_code({**done, "verdict": "fail"}, True) == (EXIT_FAIL, "verdict: fail")
    assert exit_code({"status": "failed", "reason": "every case failed"}, True) == (
        EXIT_NO_VERDICT,
        "no verdict: the job failed: every case failed",
    )
    assert exit_code({"status": "timed_out", "reason": "timed out: ..."}, True)[1].startswith(
        "no verdict: the job timed out"
    )
    assert exit_code({"status": "cancelled", "reason": "cancelled by a user"}, True)[0] == EXIT_NO_VERDICT
    assert exit_code({"status": "running"}, False) == (
        EXIT_NO_VERDICT,
        "no verdict: the wait ran out while the job was running",
    )
    assert exit_code(None, False)[0] == EXIT_NO_VERDICT


def test_submit_imports_no_server_package_and_no_torch(tmp_path: Path) -> None:
    (tmp_path / "attnprof.toml").write_text("[suite]\n")
    probe = (
        "import atexit, sys\n"
        "heavy = {'fastapi', 'starlette', 'sqlalchemy', 'alembic', 'celery', 'torch', 'psycopg'}\n"
        "atexit.register(lambda: print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & heavy)))\n"
        "from attnprof.cli import main\n"
        "main(['submit', sys.argv[1], '--source', sys.argv[2], '--server', 'http://127.0.0.1:9', '--token', 't',"
        " '--testbed', 'x', '--branch', 'b', '--commit', 'c', '--wait'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "attnprof.toml"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")},
    )
    assert done.returncode == 2, done.stderr
    assert "cannot reach http://127.0.0.1:9" in done.stderr
    assert "loaded: []" in done.stdout
