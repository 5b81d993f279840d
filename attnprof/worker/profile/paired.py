"""A paired job's part of an attempt (docs/architecture.md, "The paired job"): its second tree, the merge base's,
unpacked beside the head's (``scratch/base`` beside ``scratch/src``, with the same checks; inside the jail
``/job/base`` beside ``/job/src``, exposed alike), the ``ab`` command that profiles both interleaved in place of
``profile``, and the base's and paired documents it writes beside the head's result, read for the upload.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import ValidationError

from attnprof.contract import bundle as archive
from attnprof.contract.ids import JobId
from attnprof.core.documents import ResultDocument
from attnprof.core.documents.paired import PairedDocument
from attnprof.core.errors import DocumentError
from attnprof.worker.profile import handback, outcome
from attnprof.worker.profile.api import Refused, Unreachable, WorkerAPI

BASE_DIR = "base"
SPEC_NAME = "attnprof.toml"


def fetch_base(
    http: WorkerAPI, job_id: JobId, job: Path, *, max_bytes: int, max_unpacked_bytes: int, max_members: int
) -> outcome.JobFailure | None:
    """Download the job's base bundle and unpack it, checked as the head's is, into ``job/base``; the failure
    to report otherwise (a download that failed is the host's: retried)."""
    try:
        data = http.bundle(job_id, max_bytes=max_bytes, tree="base")
    except (Unreachable, Refused) as exc:
        return outcome.JobFailure(f"could not download the base bundle: {exc}", retry=True)
    try:
        archive.unpack(
            data,
            job / BASE_DIR,
            max_bytes=max_bytes,
            max_unpacked_bytes=max_unpacked_bytes,
            max_members=max_members,
        )
    except archive.BundleRefused as exc:
        return outcome.JobFailure(f"the base bundle was refused on the worker: {exc}")
    return None


def ab_argv(root: Path, cache_dir: Path, *, device: str, pid_namespace: bool) -> list[str]:
    """The paired profiling command, with the scratch folder at ``root`` and the peaks cache at ``cache_dir`` (as the
    job sees them). It writes ``out/result.json`` (the head's), ``out/base.json``, ``out/paired.json`` and the head's
    traces in ``out/traces``, as ``profile`` writes its result and traces."""
    argv = [
        sys.executable,
        "-m",
        "attnprof.core",
        "ab",
        str(root / SPEC_NAME),
        "--base",
        str(root / BASE_DIR),
        "--head",
        str(root / "src"),
        "--out",
        str(root / "out"),
        "--device",
        device,
        "--cache-dir",
        str(cache_dir),
        "--quiet",
    ]
    return [*argv, "--pid-namespace"] if pid_namespace else argv


def read_sides(
    folder: handback.Folder, head: ResultDocument
) -> tuple[ResultDocument, PairedDocument] | outcome.JobFailure:
    """The base's result document and the paired document that ``ab`` wrote in the job's ``out`` beside the head's
    ``head`` (read as hostile input: ``handback``), or the failure saying which is missing or invalid (the service
    would refuse the result without them)."""
    base = outcome.read_document(folder, "out/base.json")
    if not isinstance(base, ResultDocument):
        why = "it wrote none" if base is None else str(base)
        return outcome.JobFailure(f"the paired run wrote no valid base result document: {why}")
    try:
        data = outcome.read_json(folder, "out/paired.json")
    except DocumentError as exc:
        return outcome.JobFailure(f"the paired run wrote no valid paired document: {exc}")
    if data is None:
        return outcome.JobFailure("the paired run wrote no paired document (paired.json)")
    try:
        paired = PairedDocument.model_validate(data)
    except ValidationError as exc:
        shown = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return outcome.JobFailure(f"the paired run wrote no valid paired document: {shown}")
    if (paired.base_run, paired.head_run) != (base.run.id, head.run.id):
        return outcome.JobFailure(
            f"the paired document joins base {paired.base_run} and head {paired.head_run}, not the documents the "
            f"paired run wrote ({base.run.id}, {head.run.id})"
        )
    return base, paired
