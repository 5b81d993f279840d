"""The two trees of each change (the project as it is, and with the change's hunks applied), their diff, their
bundles as ``attnprof submit`` packs them, and each suite as run (the quick mode shrinks it for a CPU)."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import io
import shutil
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnprof.core.suite import TimingConfig
from bench.zoo.changes import Change

PROJECT = Path(__file__).resolve().parent / "project"
PACKAGE = "zooattn"

# The quick mode's shapes (a CPU host, seconds per run) and timing: tiny, fp32 (the CPU's fast path).
QUICK_SHAPE = {"batch": 1, "q_heads": 4, "kv_heads": 2, "head_dim": 32, "dtype": "fp32"}
QUICK_SEQ = 128
QUICK_CACHE = 256
QUICK_TIMING = {"warmup": 2, "min_samples": 6, "max_samples": 30, "budget_s": 0.3, "rounds": 2, "trace_iters": 1}
# A paired run's own bounds, where this profiler's timing table has them: few pairs, short warm-up.
QUICK_PAIRED = {"paired_floor_pairs": 4, "paired_max_pairs": 8, "paired_warmup_rounds": 2}


class PatchError(ValueError):
    """A hunk that does not apply: its text is not in the file exactly once."""


def project_files() -> dict[str, str]:
    """The project's files (relative path -> text): the package and its suites, as committed."""
    files = {}
    for path in sorted(PROJECT.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".toml"):
            files[path.relative_to(PROJECT).as_posix()] = path.read_text()
    return files


def head_files(change: Change, base: dict[str, str] | None = None) -> dict[str, str]:
    """The project with ``change``'s hunks applied, in order."""
    files = dict(base if base is not None else project_files())
    for edit in change.edits:
        text = files.get(edit.path)
        if text is None:
            raise PatchError(f"{change.name}: no file {edit.path}")
        found = text.count(edit.old)
        if found != 1:
            raise PatchError(f"{change.name}: the hunk's text is in {edit.path} {found} times, not once: {edit.old!r}")
        files[edit.path] = text.replace(edit.old, edit.new)
    return files


def diff(change: Change) -> str:
    """The change as a unified diff, as its pull request shows it."""
    base = project_files()
    head = head_files(change, base)
    out: list[str] = []
    for path in sorted(set(base) | set(head)):
        a, b = base.get(path, ""), head.get(path, "")
        if a != b:
            out += difflib.unified_diff(
                a.splitlines(keepends=True), b.splitlines(keepends=True), f"a/{path}", f"b/{path}"
            )
    return "".join(out)


def write_tree(files: dict[str, str], dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest


@dataclass(frozen=True)
class Trees:
    base: Path
    head: Path
    suite: Path  # the suite file as run (the head tree's, shrunk in the quick mode)
    base_files: dict[str, str]
    head_files: dict[str, str]


def materialize(change: Change, root: Path, *, quick: bool = False) -> Trees:
    """``root/<change>/base`` and ``root/<change>/head``, and the suite to run beside them."""
    base = project_files()
    head = head_files(change, base)
    folder = root / change.name
    suite_text = head[change.suite]
    if quick:
        suite_text = quick_suite(suite_text)
    folder.mkdir(parents=True, exist_ok=True)
    suite = folder / "suite.toml"
    suite.write_text(suite_text)
    return Trees(write_tree(base, folder / "base"), write_tree(head, folder / "head"), suite, base, head)


def bundle(files: dict[str, str]) -> bytes:
    """The tree as a gzipped tar, sorted with zero times and owners (the same tree gives the same bytes)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(files):
            data = files[rel].encode()
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def commit_of(files: dict[str, str]) -> str:
    """A stand-in commit id for a tree: the sha1 of its sorted files."""
    digest = hashlib.sha1(usedforsecurity=False)
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    return digest.hexdigest()


def quick_suite(text: str) -> str:
    """The suite with tiny fp32 shapes and a short timing section, for a CPU host."""
    data = tomllib.loads(text)
    cases = []
    for case in data["cases"]:
        case = dict(case)
        case.update({k: v for k, v in QUICK_SHAPE.items() if k in case or k in ("batch", "dtype")})
        if "kv_heads" in case and "q_heads" not in case:
            del case["kv_heads"]
        if case.get("seq_q", 0) > 1:
            case["seq_q"] = QUICK_SEQ
        if "seq_kv" in case:
            case["seq_kv"] = QUICK_CACHE
        if isinstance(case.get("args"), dict):
            case["args"] = {k: (min(v, QUICK_SEQ) if isinstance(v, int) else v) for k, v in case["args"].items()}
        cases.append(case)
    suite = dict(data["suite"])
    known = {f.name for f in dataclasses.fields(TimingConfig)}
    suite["timing"] = {k: v for k, v in {**QUICK_TIMING, **QUICK_PAIRED}.items() if k in known}
    return dumps_suite(suite, cases)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {v!r}")


def dumps_suite(suite: dict[str, Any], cases: list[dict[str, Any]]) -> str:
    """A suite file from its tables (flat values, inline tables for ``args`` and ``thresholds``)."""
    lines = ["[suite]"]
    lines += [f"{k} = {_value(v)}" for k, v in suite.items() if not isinstance(v, dict)]
    for key, table in ((k, v) for k, v in suite.items() if isinstance(v, dict)):
        lines += ["", f"[suite.{key}]", *(f"{k} = {_value(v)}" for k, v in table.items())]
    for case in cases:
        lines += ["", "[[cases]]", *(f"{k} = {_value(v)}" for k, v in case.items())]
    return "\n".join(lines) + "\n"
