"""A bisection end to end on the CPU, through real processes: ``attnprof serve``, the analysis worker with beat (the
sweep that advances it) and a CPU profile worker, on Postgres and Redis, with the GitHub stand-in serving a real git
history of sixteen commits (the compare and tarball endpoints; ``git archive`` makes each tarball). One commit makes
the project's attention three times slower. The bisection, asked for through the API with the step's size, finds it
and confirms it against its parent in at most ⌈log₂ 16⌉ + 1 = 5 paired jobs, each a background job run in the jail,
and names its pull request with a comment there."""

from __future__ import annotations

import io
import math
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.core.test_bisect_local import SUITE, make_history
from tests.profiling_support import tar_gz
from tests.server.github.bisectstack import TESTBED, bisect_stack
from tests.server.github.fakegithub import FakeGitHub
from tests.worker.stack import Stack, wait_for

pytestmark = pytest.mark.slow

REPO = "acme/history"
CULPRIT = 11
PR = 77


def _archive(repo: Path, sha: str) -> bytes:
    prefix = f"acme-history-{sha[:7]}/"
    return subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar.gz", f"--prefix={prefix}", sha],
        capture_output=True,
        check=True,
    ).stdout


def _files(tarball: bytes) -> dict[str, bytes]:
    """A GitHub tarball's files without its top folder: what a client would bundle from that commit."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member) if member.isfile() else None
            if f is not None:
                out[member.name.split("/", 1)[1]] = f.read()
    return out


@pytest.fixture(scope="module")
def github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeGitHub, list[str], Path]]:
    repo = tmp_path_factory.mktemp("history") / "repo"
    shas = make_history(repo, culprit=CULPRIT)
    with FakeGitHub() as fake:
        for i, sha in enumerate(shas):
            fake.add_commit(REPO, sha, (shas[i - 1],) if i else (), f"change {i}", _archive(repo, sha))
        fake.state.pulls[shas[CULPRIT]] = [{"number": PR, "merged_at": "2026-12-01T10:00:00Z"}]
        yield fake, shas, repo


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, github: tuple[FakeGitHub, list[str], Path]) -> Iterator[Stack]:
    with bisect_stack(tmp_path_factory.mktemp("bisectstack"), github[0], REPO) as s:
        yield s


def test_a_threefold_slowdown_in_sixteen_commits_is_found_and_confirmed_in_five_paired_jobs(
    stack: Stack, github: tuple[FakeGitHub, list[str], Path]
) -> None:
    fake, shas, repo = github
    # The project's job on the testbed, whose suite the bisection runs: the good commit, profiled once.
    with stack.http() as http:
        r = http.post(
            f"/api/v1/projects/{stack.project}/jobs",
            data={"testbed": TESTBED, "branch": "main", "commit": shas[0], "repo": REPO},
            files={
                "spec": ("perf.toml", SUITE.encode()),
                "bundle": ("src.tar.gz", tar_gz(_files(_archive(repo, shas[0])))),
            },
        )
    assert r.status_code == 202, r.text
    seed = stack.wait_status(r.json()["id"], ("done", "failed", "timed_out"), 400)
    assert seed["status"] == "done", seed
    url = f"/api/v1/projects/{stack.project}/bisections"
    with stack.http() as http:
        r = http.post(
            url,
            json={
                "testbed": TESTBED,
                "good": shas[0],
                "bad": shas[-1],
                "cases": ["step"],
                "effect": 2.0,
                "low": 1.0,
                "high": 3.0,
            },
        )
    assert r.status_code == 201, r.text
    bisection_id = r.json()["id"]

    def ended() -> dict[str, Any] | None:
        with stack.http() as http:
            found: dict[str, Any] = http.get(f"{url}/{bisection_id}").json()
        return found if found["status"] not in ("pending", "running") else None

    done = wait_for("the bisection to end", ended, 900, every_s=2, logs=stack.logs)
    assert done["status"] == "confirmed", done
    assert done["culprit"] == shas[CULPRIT] and done["culprit_pr"] == PR
    probes = done["probes"]
    assert len(probes) <= math.ceil(math.log2(16)) + 1 == done["budget"] == 5, probes
    assert len({(p["good"], p["candidate"]) for p in probes}) == len(probes)
    assert all(p["job_status"] == "done" for p in probes if p["outcome"] != "skip")
    last = probes[-1]
    assert last["good"] == shas[CULPRIT - 1] and last["candidate"] == shas[CULPRIT] and last["outcome"] == "bad"
    with stack.http() as http:
        for p in probes:
            job = http.get(f"/api/v1/jobs/{p['job_id']}").json()
            assert (
                job["paired"] and job["commit"] == p["candidate"] and job["branch"] == f"attnprof/bisect-{bisection_id}"
            )
    # Only then: one comment on the culprit's pull request, with what it slowed and by how much.
    comments = wait_for("the culprit's comment", lambda: fake.comments(REPO, PR) or None, 60, logs=stack.logs)
    assert len(comments) == 1 and shas[CULPRIT][:12] in comments[0]["body"] and "`step`" in comments[0]["body"]
    # Each commit's tree was downloaded once, however many probes it was a side of.
    tarballs = [r.path for r in fake.requests("GET") if "/tarball/" in r.path]
    assert len(tarballs) == len(set(tarballs))
