"""What ``attnprof submit`` sends besides the suite: the source bundle and where the code came from (git).

Client side: the standard library only (git is run as a program). The bundle is the files of ``--source``
that git would track (``git ls-files -co --exclude-standard``: committed or new, .gitignore respected), or,
outside a git checkout, every file minus the usual build and cache folders and the patterns of a top-level
``.gitignore``. Links are left out; sizes are bounded before anything is sent. The archive is made
deterministic (sorted, zero times and owners, a gzip header without a time), so the same source gives the same
bundle and the service stores it once. ``attnprof.client.base_tree`` builds the paired mode's base bundle in the
same form with :func:`pack` (``attnprof.contract.bundle``, which the service's bisection packs with too).
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from attnprof.contract.bundle import pack

MIB = 1024 * 1024
ANCESTORS_MAX = 50
_SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    "build",
    "dist",
}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so.tmp")
_GITHUB_REMOTE = re.compile(r"github\.com[:/]+([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


class SourceError(Exception):
    """The source cannot be bundled (missing, too large, too many files); the message says why."""


@dataclass(frozen=True)
class Bundle:
    data: bytes
    files: int
    unpacked_bytes: int
    skipped_links: list[str] = field(default_factory=list)


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def is_git_checkout(root: Path) -> bool:
    """Whether ``root`` is part of a git work tree. A folder that its enclosing work tree ignores (a scratch or
    build folder such as ``out/``) is not: git would track none of its files, so it is bundled as a plain
    folder, and it has no commit of its own."""
    if (_git(root, "rev-parse", "--is-inside-work-tree") or "").strip() != "true":
        return False
    return _git(root, "check-ignore", "-q", ".") is None


def _ignore_patterns(root: Path) -> list[str]:
    try:
        lines = (root / ".gitignore").read_text().splitlines()
    except OSError:
        return []
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "!"))]


def _ignored(rel: PurePosixPath, patterns: list[str]) -> bool:
    for p in patterns:
        anchored = p.startswith("/")
        pat = p.lstrip("/")
        if anchored or "/" in pat:
            if fnmatch.fnmatch(str(rel), pat) or any(fnmatch.fnmatch(str(a), pat) for a in rel.parents):
                return True
        elif any(fnmatch.fnmatch(part, pat) for part in rel.parts):
            return True
    return False


def list_files(root: Path) -> list[str]:
    """Paths (relative, POSIX) of the files to bundle from ``root``, sorted."""
    if is_git_checkout(root):
        listed = _git(root, "ls-files", "-co", "--exclude-standard", "-z")
        if listed is not None:
            names = {n for n in listed.split("\0") if n}
            return sorted(n for n in names if (root / n).exists() or (root / n).is_symlink())
    patterns = _ignore_patterns(root)
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in _SKIP_DIRS and not d.endswith(".egg-info") and not _ignored(here / d, patterns)
        )
        for name in filenames:
            rel = here / name if str(here) != "." else PurePosixPath(name)
            if not name.endswith(_SKIP_SUFFIXES) and not _ignored(rel, patterns):
                out.append(str(rel))
    return sorted(out)


def build_bundle(
    root: Path, *, max_bytes: int = 50 * MIB, max_unpacked_bytes: int = 500 * MIB, max_files: int = 10_000
) -> Bundle:
    """A tar.gz of ``root``'s files (see the module's docstring). Raises ``SourceError`` past a limit."""
    if not root.is_dir():
        raise SourceError(f"--source {root}: not a directory")
    names = list_files(root)
    regular: list[tuple[str, Path]] = []
    links: list[str] = []
    for name in names:
        path = root / name
        if path.is_symlink():
            links.append(name)
        elif path.is_file():
            regular.append((name, path))
    if not regular:
        raise SourceError(f"--source {root}: no files to bundle")
    if len(regular) > max_files:
        raise SourceError(f"--source {root}: {len(regular)} files; the limit is {max_files} (is a .gitignore missing?)")
    total = sum(p.stat().st_size for _, p in regular)
    if total > max_unpacked_bytes:
        raise SourceError(
            f"--source {root}: {total / MIB:.1f} MiB of files; the limit is {max_unpacked_bytes / MIB:.0f} MiB"
        )
    data = pack((name, p.stat().st_size, os.access(p, os.X_OK), p) for name, p in regular)
    if len(data) > max_bytes:
        raise SourceError(f"the bundle of {root} is {len(data) / MIB:.1f} MiB; the limit is {max_bytes / MIB:.0f} MiB")
    return Bundle(data=data, files=len(regular), unpacked_bytes=total, skipped_links=links)


@dataclass(frozen=True)
class GitInfo:
    """Where the code came from; each field ``None`` where git (or the CI's environment) cannot tell."""

    commit: str | None = None
    branch: str | None = None
    repo: str | None = None
    base_commit: str | None = None
    ancestors: list[str] = field(default_factory=list)


def _first_line(text: str | None) -> str | None:
    line = (text or "").strip().splitlines()
    return line[0].strip() if line and line[0].strip() else None


def git_info(root: Path, *, default_branch: str = "main", base_commit: str | None = None) -> GitInfo:
    """Commit, branch, repository, the merge base with the default branch and its first-parent ancestors.

    The base: ``git merge-base HEAD origin/<default>`` (or the local ``<default>``); on the default branch
    itself (the base is HEAD) the parent ``HEAD~1``; without the default branch, ``HEAD~1`` too. The
    ancestors: ``git rev-list --first-parent`` from the base, newest first, at most 50. In GitHub Actions the
    branch and the repository come from ``GITHUB_HEAD_REF``/``GITHUB_REF_NAME`` and ``GITHUB_REPOSITORY``.
    """
    env = os.environ
    repo = env.get("GITHUB_REPOSITORY") or None
    branch = env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME") or None
    if not is_git_checkout(root):
        return GitInfo(branch=branch, repo=repo, base_commit=base_commit)
    commit = _first_line(_git(root, "rev-parse", "HEAD"))
    if branch is None:
        name = _first_line(_git(root, "rev-parse", "--abbrev-ref", "HEAD"))
        branch = name if name and name != "HEAD" else None
    if repo is None:
        match = _GITHUB_REMOTE.search(_first_line(_git(root, "remote", "get-url", "origin")) or "")
        repo = match.group(1) if match else None
    base = base_commit
    if base is None and commit is not None:
        for ref in (f"origin/{default_branch}", default_branch):
            base = _first_line(_git(root, "merge-base", "HEAD", ref))
            if base:
                break
        if base is None or base == commit:
            base = _first_line(_git(root, "rev-parse", "--verify", "--quiet", "HEAD~1"))
    ancestors: list[str] = []
    if base is not None:
        listed = _git(root, "rev-list", "--first-parent", f"--max-count={ANCESTORS_MAX}", base)
        ancestors = [ln.strip() for ln in (listed or "").splitlines() if ln.strip()]
    return GitInfo(commit=commit, branch=branch, repo=repo, base_commit=base, ancestors=ancestors)


def suite_path(suite: Path, source: Path | None = None) -> str | None:
    """The suite file's path relative to its repository's root, with ``/`` between its parts, as a job carries it
    (``attnprof.contract.suite_path``): relative to git's top level when the suite lies in a git work tree; else to
    ``GITHUB_WORKSPACE`` (a GitHub runner's checkout) or to ``source`` (the bundled folder) when it lies in one of
    them. None when none of them holds it: the job is then sent without it."""
    resolved = suite.resolve()
    roots: list[Path] = []
    top = _first_line(_git(resolved.parent, "rev-parse", "--show-toplevel"))
    if top:
        roots.append(Path(top))
    if workspace := os.environ.get("GITHUB_WORKSPACE"):
        roots.append(Path(workspace))
    if source is not None:
        roots.append(source)
    for root in roots:
        try:
            return resolved.relative_to(root.resolve()).as_posix()
        except (ValueError, OSError):
            continue
    return None
