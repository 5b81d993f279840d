"""Source for any commit, through GitHub's REST API: the commits between two ends of a step (the compare endpoint),
and each commit's tree (the tarball endpoint), unpacked with the checks a submitted bundle gets.

- ``GET /repos/{owner}/{repo}/compare/{base}...{head}`` answers ``status`` (``ahead``, ``behind``, ``diverged``,
  ``identical``) and the commits from the merge base to ``head``, oldest first, paged by ``per_page`` and ``page``
  with a ``Link`` header; a bisection needs ``head`` ahead of ``base``.
- ``GET /repos/{owner}/{repo}/tarball/{ref}`` answers ``302 Found`` to a short-lived download URL; the archive holds
  one top folder (``owner-repo-sha/``) and a pax header naming the commit. A commit GitHub no longer has (force-pushed
  away and collected) is ``404``.

- ``GET /repos/{owner}/{repo}/commits/{sha}/pulls`` lists the pull requests a commit belongs to (the merged one
  is the one it came from).

Rate limits and server errors are retried as every GitHub call of the service's is (``GitHubClient.request``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnprof.contract import bundle
from attnprof.server.bisections import service as bisecting
from attnprof.server.github.client import GitHubClient, GitHubError

MAX_COMMITS = 1000
"""The longest range a bisection takes: 10 probes of halving at most."""


class SourceError(Exception):
    """The range or a commit's tree cannot be had: said so that the bisection's page can show it."""


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    message: str = ""

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1


def commits_between(client: GitHubClient, repo: str, base: str, head: str, *, limit: int = MAX_COMMITS) -> list[Commit]:
    """The commits after ``base`` up to ``head``, oldest first (GitHub's order)."""
    url = f"/repos/{repo}/compare/{base}...{head}"
    try:
        response = client.request("GET", url, params={"per_page": 100})
    except GitHubError as exc:
        if exc.status == 404:
            raise SourceError(f"{repo}: {base} or {head} is not a commit GitHub has (force-pushed away?)") from exc
        raise
    data = response.json()
    status = data.get("status")
    if status not in ("ahead", "identical"):
        raise SourceError(f"{repo}: {head} is not ahead of {base} (GitHub says {status!r})")
    total = int(data.get("total_commits") or 0)
    if total > limit:
        raise SourceError(f"{repo}: {total} commits between {base} and {head}; a bisection takes at most {limit}")
    found = [_commit(c) for c in data.get("commits", [])]
    while (nxt := response.links.get("next", {}).get("url")) and len(found) < total:
        response = client.request("GET", nxt)
        found += [_commit(c) for c in response.json().get("commits", [])]
    return found


def _commit(c: Any) -> Commit:
    parents = c.get("parents") or []
    detail = c.get("commit")
    message = str(detail.get("message") or "") if isinstance(detail, dict) else ""
    return Commit(
        str(c["sha"]),
        tuple(str(p["sha"]) for p in parents if isinstance(p, dict)),
        message.splitlines()[0][:200] if message else "",
    )


def fetch_tree(
    client: GitHubClient,
    repo: str,
    sha: str,
    dest: Path,
    *,
    max_bytes: int = bundle.DEFAULT_BUNDLE_BYTES,
    max_unpacked_bytes: int = bundle.DEFAULT_BUNDLE_UNPACKED_BYTES,
    max_members: int = bundle.DEFAULT_BUNDLE_MEMBERS,
) -> Path:
    """``sha``'s tree in ``dest`` (made; fetched once: an existing ``dest`` is kept), from GitHub's tarball, checked
    and unpacked as a bundle is, its top folder removed."""
    if dest.is_dir():
        return dest
    try:
        data = client.download(f"/repos/{repo}/tarball/{sha}", max_bytes=max_bytes)
    except GitHubError as exc:
        if exc.status == 404:
            raise SourceError(f"{repo}@{sha}: GitHub has no such commit (force-pushed away?)") from exc
        raise
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tree-", dir=dest.parent))
    try:
        bundle.unpack(
            data, staging, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members
        )
        tops = list(staging.iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise SourceError(f"{repo}@{sha}: the tarball does not hold one top folder, as GitHub's do")
        tops[0].rename(dest)
    except bundle.BundleRefused as exc:
        raise SourceError(f"{repo}@{sha}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def bundle_of(tree: Path, *, max_bytes: int = bundle.DEFAULT_BUNDLE_BYTES) -> bytes:
    """A commit's tree packed as a submitted bundle is (``attnprof.contract.bundle.pack``): its files, sorted, links
    left out (a bundle holds none)."""
    members: list[bundle.Member] = []
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            members.append((path.relative_to(tree).as_posix(), path.stat().st_size, os.access(path, os.X_OK), path))
    if not members:
        raise SourceError(f"{tree.name}: the commit's tree holds no files")
    data = bundle.pack(members)
    if len(data) > max_bytes:
        raise SourceError(f"the tree is {len(data)} bytes packed; a bundle takes at most {max_bytes}")
    return data


def pull_of(client: GitHubClient, repo: str, sha: str) -> int | None:
    """The pull request a commit came from: ``GET /repos/{owner}/{repo}/commits/{sha}/pulls`` ("List pull requests
    associated with a commit"), the merged one first; None when GitHub names none."""
    try:
        pulls = client.request("GET", f"/repos/{repo}/commits/{sha}/pulls", params={"per_page": 100}).json()
    except GitHubError as exc:
        if exc.status in (404, 422):
            return None
        raise
    if not isinstance(pulls, list):
        return None
    merged = [p for p in pulls if isinstance(p, dict) and p.get("merged_at")]
    for p in merged or pulls:
        if isinstance(p, dict) and isinstance(p.get("number"), int):
            return int(p["number"])
    return None


class GitHubSource:
    """The bisection's ``Source`` (``attnprof.server.bisections.service``) through GitHub: each tree fetched once into
    ``cache`` (a folder per repository and commit, kept while the service runs) and packed as a bundle."""

    def __init__(self, client: GitHubClient, cache: Path, *, max_bytes: int = bundle.DEFAULT_BUNDLE_BYTES) -> None:
        self.client, self.cache, self.max_bytes = client, cache, max_bytes

    def commits(self, repo: str, good: str, bad: str) -> list[bisecting.Commit]:
        try:
            found = commits_between(self.client, repo, good, bad)
        except (SourceError, GitHubError) as exc:
            raise bisecting.SourceError(str(exc)) from exc
        return [bisecting.Commit(c.sha, c.parents) for c in found]

    def tree(self, repo: str, sha: str) -> bytes:
        dest = self.cache / repo.replace("/", "--") / sha
        try:
            return bundle_of(
                fetch_tree(self.client, repo, sha, dest, max_bytes=self.max_bytes), max_bytes=self.max_bytes
            )
        except (SourceError, GitHubError) as exc:
            raise bisecting.SourceError(str(exc)) from exc
        finally:
            shutil.rmtree(dest, ignore_errors=True)  # the bundle is kept by the bisection (its ``trees``)

    def pull_of(self, repo: str, sha: str) -> int | None:
        try:
            return pull_of(self.client, repo, sha)
        except GitHubError:
            return None
