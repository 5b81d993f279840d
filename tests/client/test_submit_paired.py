"""``attnprof submit --paired``: the merge base's tree bundled from git (a real repository made here) and the
multipart form the client sends, recorded by a small HTTP server on loopback that answers as the service's job
route does (``GET /api/v1/token``, ``POST /api/v1/projects/{p}/jobs``)."""

from __future__ import annotations

import email
import email.policy
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from attnprof.client import base_tree
from attnprof.client import http as client
from attnprof.client import source as client_source
from attnprof.contract import bundle as contract_bundle
from attnprof.contract.provenance import Provenance


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env)
    return done.stdout.strip()


def _files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


@dataclass
class Repo:
    root: Path
    base: str  # main's tip, the feature branch's merge base
    head: str

    @property
    def src(self) -> Path:
        return self.root / "src"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    for name in ("GITHUB_REPOSITORY", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "repo"
    files = {
        "src/kern.py": "SCALE = 1\n",
        "src/util/helper.py": "def f():\n    return 1\n",
        "src/run.sh": "#!/bin/sh\n",
        "src/bench_data.bin": "ignored by git archive\n",
        "src/.gitattributes": "bench_data.bin export-ignore\n",
        "lib/common.py": "C = 3\n",
        "attnprof.toml": "[suite]\n",
        "README": "top\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "src" / "run.sh").chmod(0o755)
    (root / "src" / "link.py").symlink_to("kern.py")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "base")
    _git(root, "commit", "-q", "--allow-empty", "-m", "main's tip")
    base = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "-b", "feature")
    (root / "src" / "kern.py").write_text("SCALE = 2\n")
    (root / "src" / "new.py").write_text("NEW = 1\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "the change")
    (root / "src" / "scratch.py").write_text("untracked: the head's bundle takes it, the base's cannot\n")
    return Repo(root, base, _git(root, "rev-parse", "HEAD"))


def test_the_base_bundle_holds_the_merge_bases_files_not_the_heads(repo: Repo) -> None:
    found = client_source.git_info(repo.src).base_commit
    assert found == repo.base
    assert base_tree.check_base(repo.src, repo.base[:10], default_branch="main") == repo.base  # the full sha
    built = base_tree.build_base_bundle(repo.src, repo.base)
    # Names relative to --source as in the head's bundle; export-ignore honoured; the link left out and named.
    assert _files(built.data) == {
        ".gitattributes": b"bench_data.bin export-ignore\n",
        "kern.py": b"SCALE = 1\n",
        "run.sh": b"#!/bin/sh\n",
        "util/helper.py": b"def f():\n    return 1\n",
    }
    assert (built.files, built.skipped_links) == (4, ["link.py"])
    with tarfile.open(fileobj=io.BytesIO(built.data), mode="r:gz") as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
        assert all((m.mtime, m.uid, m.uname) == (0, 0, "") for m in tar.getmembers())
    assert modes["run.sh"] == 0o755 and modes["kern.py"] == 0o644
    head = _files(client_source.build_bundle(repo.src).data)
    assert head["kern.py"] == b"SCALE = 2\n" and "new.py" in head and "scratch.py" in head
    # What the service and the worker check a bundle by accepts it.
    limits = {"max_bytes": 50 << 20, "max_unpacked_bytes": 500 << 20, "max_members": 10_000}
    assert contract_bundle.check(built.data, **limits) == 4


def test_the_same_tree_gives_the_same_bytes_and_an_untouched_folder_the_heads(repo: Repo) -> None:
    first = base_tree.build_base_bundle(repo.src, repo.base).data
    time.sleep(1.1)  # a gzip header with the time in it would differ now
    assert base_tree.build_base_bundle(repo.src, repo.base).data == first
    # lib/ did not change between the merge base and the head: both sides' bundles are one stored artifact.
    lib = repo.root / "lib"
    assert base_tree.build_base_bundle(lib, repo.base).data == client_source.build_bundle(lib).data
    assert client_source.build_bundle(lib).data == client_source.build_bundle(lib).data


def test_the_base_trees_limits_are_the_heads_and_name_the_base_tree(repo: Repo) -> None:
    for limits in ({"max_files": 3}, {"max_unpacked_bytes": 20}, {"max_bytes": 100}):
        with pytest.raises(client_source.SourceError, match=r"the base tree \(--source .*src at the merge base") as e:
            base_tree.build_base_bundle(repo.src, repo.base, **limits)
        assert "limit" in str(e.value)
    assert base_tree.build_base_bundle(repo.src, repo.base, max_files=4).files == 4
    with pytest.raises(client_source.SourceError, match="the folder did not exist at that commit"):
        base_tree.build_base_bundle(repo.root / "later", _first_then_add_folder(repo))


def _first_then_add_folder(repo: Repo) -> str:
    (repo.root / "later").mkdir()
    (repo.root / "later" / "x.py").write_text("x\n")
    _git(repo.root, "add", "later")
    _git(repo.root, "commit", "-q", "-m", "a folder the base does not have")
    return repo.base


def test_no_checkout_no_merge_base_and_a_shallow_clone_are_clear_errors(repo: Repo, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(client_source.SourceError, match="is not in a git checkout"):
        base_tree.check_base(plain, None, default_branch="main")
    # A depth-1 clone of the feature branch, as actions/checkout makes by default: no main, no parent, no base.
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{repo.root}", str(shallow))
    info = client_source.git_info(shallow / "src")
    assert info.commit == repo.head and info.base_commit is None
    with pytest.raises(client_source.SourceError, match=r"the clone is shallow: fetch the history.*fetch-depth: 0"):
        base_tree.check_base(shallow / "src", None, default_branch="main")
    # GitHub names the base commit (the event's), but a shallow clone does not hold it.
    with pytest.raises(client_source.SourceError, match=f"the merge base {repo.base} is not a commit in this clone"):
        base_tree.check_base(shallow / "src", repo.base, default_branch="main")
    # A full clone with one commit and no default branch: nothing to compare with, and not for want of history.
    orphan = tmp_path / "orphan"
    (orphan / "a").mkdir(parents=True)
    (orphan / "a" / "x.py").write_text("x\n")
    _git(orphan, "init", "-q", "-b", "work")
    _git(orphan, "add", ".")
    _git(orphan, "commit", "-q", "-m", "only")
    found = client_source.git_info(orphan / "a").base_commit
    with pytest.raises(client_source.SourceError, match=r"no merge base.*pass --base-commit") as caught:
        base_tree.check_base(orphan / "a", found, default_branch="main")
    assert "shallow" not in str(caught.value)


# --- the request: a server on loopback records the multipart form ------------------------------------------------


@dataclass
class Recorded:
    url: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)  # name: (filename, content type, bytes)


@contextmanager
def recording() -> Iterator[Recorded]:
    seen = Recorded()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            seen.requests.append(("GET", self.path))
            self._answer(200, {"project": "p"})

        def do_POST(self) -> None:
            seen.requests.append(("POST", self.path))
            body = self.rfile.read(int(self.headers["Content-Length"]))
            head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
            form = email.message_from_bytes(head + body, policy=email.policy.HTTP)
            for part in form.iter_parts():
                name = part.get_param("name", header="content-disposition")
                payload = part.get_payload(decode=True)
                if part.get_filename() is None:
                    seen.fields[str(name)] = payload.decode()
                else:
                    seen.files[str(name)] = (part.get_filename(), part.get_content_type(), payload)
            self._answer(202, {"id": "j1", "status": "queued"})

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def _submit(cwd: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNPROF_", "GITHUB_"))}
    argv = [sys.executable, "-c", "from attnprof.cli import main; main()", "submit", *args]
    argv += ["--server", url, "--token", "t", "--testbed", "tb", "--timeout", "20"]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def test_submit_paired_sends_base_bundle_and_base_commit(repo: Repo) -> None:
    with recording() as server:
        done = _submit(repo.root, server.url, "attnprof.toml", "--source", "src", "--paired")
    assert done.returncode == 0, done.stderr
    assert f"base bundle ({repo.base[:12]}): 4 file(s)" in done.stderr
    assert server.requests == [("GET", "/api/v1/token"), ("POST", "/api/v1/projects/p/jobs")]
    assert (server.fields["commit"], server.fields["base_commit"]) == (repo.head, repo.base)
    assert server.fields["branch"] == "feature" and json.loads(server.fields["ancestors"])[0] == repo.base
    assert set(server.files) == {"spec", "bundle", "base_bundle"}
    filename, kind, sent = server.files["base_bundle"]
    assert (filename, kind) == ("base.tar.gz", "application/gzip")
    assert sent == base_tree.build_base_bundle(repo.src, repo.base).data
    assert _files(sent)["kern.py"] == b"SCALE = 1\n" and _files(server.files["bundle"][2])["kern.py"] == b"SCALE = 2\n"
    # Without --paired the job is what it was: no base_bundle.
    with recording() as server:
        assert _submit(repo.root, server.url, "attnprof.toml", "--source", "src").returncode == 0
    assert set(server.files) == {"spec", "bundle"} and server.fields["base_commit"] == repo.base


def test_submit_paired_refusals_exit_2_and_send_nothing(repo: Repo, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{repo.root}", str(shallow))
    plain = tmp_path / "plain"
    (plain / "code").mkdir(parents=True)
    (plain / "code" / "k.py").write_text("k\n")
    (plain / "attnprof.toml").write_text("[suite]\n")
    cases = [
        (repo.root, ["attnprof.toml", "--paired"], "--paired needs --source"),
        (shallow, ["attnprof.toml", "--source", "src", "--paired"], "shallow: fetch the history.*fetch-depth: 0"),
        (plain, ["attnprof.toml", "--source", "code", "--paired", "--branch", "b", "--commit", "c"], "git checkout"),
    ]
    for cwd, args, message in cases:
        with recording() as server:
            done = _submit(cwd, server.url, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert re.search(message, done.stderr), done.stderr
        assert server.requests == []


def test_submit_job_refuses_a_base_bundle_without_its_base_commit() -> None:
    with client.connect("http://127.0.0.1:9", "t") as http, pytest.raises(client.SubmitError, match="base_commit"):
        client.submit_job(
            http,
            project="p",
            spec="[suite]\n",
            testbed="tb",
            provenance=Provenance(branch="b", commit="c"),
            bundle=b"head",
            base_bundle=b"base",
            idempotency_key="k",
        )
