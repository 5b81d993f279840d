"""The paired mode's second tree: the ``--source`` folder as it was at the merge base, bundled from git.

``git archive <merge base> -- <folder>`` gives the files committed there, so the working copy plays no part (the
head's bundle, ``source.build_bundle``, also takes its new untracked files). As ``git archive`` does, it honours
``.gitattributes``: ``export-ignore`` paths are left out and ``export-subst`` placeholders expanded at that
commit. The archive is read as a stream and packed again by ``attnprof.contract.bundle.pack`` in the head bundle's form
(sorted, files only, zero times and owners), with the head's limits and its rule for links (left out, named), so the
service checks both bundles alike, and a folder that did not change between the two commits gives the head's
bytes exactly.

Standard library only; git is run as a program. Errors are ``SourceError`` naming the base tree and what to do.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from attnprof.client.source import MIB, Bundle, SourceError, is_git_checkout
from attnprof.contract.bundle import Member, pack

DEPTH_HINT = (
    "fetch the history: in GitHub Actions, actions/checkout with fetch-depth: 0; elsewhere git fetch --unshallow"
)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=False)


def _shallow(root: Path) -> bool:
    return _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def _failed(what: str, err: str) -> SourceError:
    if "did not match any files" in err:
        return SourceError(f"{what}: the folder did not exist at that commit; a paired job needs it in both trees")
    return SourceError(f"{what}: git archive failed: {err}")


def check_base(root: Path, base_commit: str | None, *, default_branch: str) -> str:
    """The full sha of the merge base the base tree is read at; ``SourceError`` when ``root`` is not in a git
    checkout, no merge base was found, or the commit is not in this clone (a shallow one, most often)."""
    if not is_git_checkout(root):
        raise SourceError(
            f"--paired: --source {root} is not in a git checkout (or its checkout ignores it): the base tree is "
            "read from git at the merge base; run in a clone of the repository"
        )
    shallow = _shallow(root)
    if base_commit is None:
        why = f"no merge base of HEAD with origin/{default_branch} or {default_branch}, and HEAD has no parent"
        hint = f"the clone is shallow: {DEPTH_HINT}" if shallow else "pass --base-commit or --default-branch"
        raise SourceError(f"--paired: {why}: {hint}")
    found = _git(root, "rev-parse", "--verify", "--quiet", f"{base_commit}^{{commit}}")
    if found.returncode != 0 or not found.stdout.strip():
        where = f"this clone is shallow: {DEPTH_HINT}" if shallow else "fetch it, or pass another --base-commit"
        raise SourceError(f"--paired: the merge base {base_commit} is not a commit in this clone; {where}")
    return found.stdout.strip()


def build_base_bundle(
    root: Path,
    base_commit: str,
    *,
    max_bytes: int = 50 * MIB,
    max_unpacked_bytes: int = 500 * MIB,
    max_files: int = 10_000,
) -> Bundle:
    """The tar.gz of ``root`` (a folder of a git work tree) at ``base_commit``, with member names relative to
    ``root`` as in the head's bundle. Raises ``SourceError`` naming the base tree past a limit, when the folder
    did not exist at that commit or holds no file there, or when git fails."""
    what = f"the base tree (--source {root} at the merge base {base_commit[:12]})"
    top = _git(root, "rev-parse", "--show-toplevel").stdout.strip()
    prefix = _git(root, "rev-parse", "--show-prefix").stdout.strip()
    if not top:
        raise SourceError(f"{what}: git cannot find the work tree's top level")
    argv = ["git", "-C", top, "archive", "--format=tar", base_commit, "--", prefix or "."]
    files: dict[str, tuple[bytes, bool]] = {}
    links: list[str] = []
    total_bytes = 0
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    name = member.name.removeprefix(prefix)
                    if member.issym() or member.islnk():
                        links.append(name)
                        continue
                    if not member.isfile():
                        continue  # directories (and submodules, which git archive leaves empty)
                    total_bytes += member.size
                    if len(files) + 1 > max_files:
                        raise SourceError(f"{what}: more than the limit of {max_files} files")
                    if total_bytes > max_unpacked_bytes:
                        raise SourceError(f"{what}: more than the limit of {max_unpacked_bytes / MIB:.0f} MiB of files")
                    data = tar.extractfile(member)
                    files[name] = (data.read() if data is not None else b"", bool(member.mode & 0o111))
        except tarfile.TarError as exc:  # git wrote no archive (or a broken one): its message says why
            proc.kill()
            proc.wait()
            raise _failed(what, proc.stderr.read().decode(errors="replace").strip() or str(exc)) from None
        except SourceError:
            proc.kill()
            raise
        proc.stdout.read()
        err = proc.stderr.read().decode(errors="replace").strip()
        if proc.wait() != 0:
            raise _failed(what, err)
    if not files:
        raise SourceError(f"{what}: no files to bundle")
    members: list[Member] = [(name, len(data), executable, data) for name, (data, executable) in sorted(files.items())]
    bundle = pack(members)
    if len(bundle) > max_bytes:
        raise SourceError(f"{what}: its bundle is {len(bundle) / MIB:.1f} MiB; the limit is {max_bytes / MIB:.0f} MiB")
    return Bundle(data=bundle, files=len(files), unpacked_bytes=total_bytes, skipped_links=sorted(links))
