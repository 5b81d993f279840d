"""What an attempt amounts to, and the reasons people read."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from attnprof.core.documents import ResultDocument, parse_result
from attnprof.core.errors import DocumentError
from attnprof.worker.profile import handback
from attnprof.worker.profile.outcome import REASON_MAX_CHARS, JobFailure, decide, read_document, with_output
from attnprof.worker.profile.sandbox import Finished

MIB = 1024 * 1024
H200_RESULT = Path(__file__).resolve().parents[1] / "data" / "h200" / "attnprof" / "result.json"


def _fin(code: int | None = 0, stopped=None, tail=None, peak=0) -> Finished:
    return Finished(exit_code=code, stopped=stopped, wall_s=1.0, peak_rss_bytes=peak, tail=tail or ["last line"])


def _doc(*cases: dict) -> ResultDocument:
    """The H200 run with only ``cases`` (id, status and error given; the rest a case needs made up)."""
    made = [{"name": c["id"], "target": "sdpa", "params": {}, **c} for c in cases]
    return parse_result({**json.loads(H200_RESULT.read_text()), "cases": made})


def _decide(finished: Finished, document=None):
    return decide(finished, document, timeout_s=600, memory_limit_bytes=8 * 1024 * MIB)


def test_timeout_is_timed_out_with_the_limit_and_the_output() -> None:
    f = _decide(_fin(-9, "timeout", ["step 1", "step 2"]))
    assert isinstance(f, JobFailure) and f.timed_out and not f.retry
    assert f.reason.startswith("timed out: the suite ran for more than the worker's wall-clock limit of 600 s")
    assert f.reason.endswith("last 2 line(s) of output:\nstep 1\nstep 2")


def test_out_of_host_memory_says_how_much() -> None:
    f = _decide(_fin(-9, "memory", peak=9000 * MIB))
    assert isinstance(f, JobFailure) and not f.timed_out
    assert "out of host memory" in f.reason and "9,000 MiB" in f.reason and "8,192 MiB" in f.reason


def test_bad_input_crash_and_missing_document() -> None:
    assert "could not run (bad input, exit code 2)" in _decide(_fin(2, tail=["error: cases[0].x: unknown"])).reason
    crash = _decide(_fin(-11, tail=["Fatal Python error: Segmentation fault"]))
    assert "crashed: killed by SIGSEGV (exit code -11)" in crash.reason and "Segmentation fault" in crash.reason
    assert "exited with code 0 and wrote no result document" in _decide(_fin(0)).reason


def test_a_suite_whose_code_cannot_be_imported_is_a_failure() -> None:
    doc = _doc(
        {"id": "a", "status": "failed", "error": {"type": "ImportError", "message": "cannot import mypkg.k:f"}},
        {"id": "b", "status": "skipped", "error": {"type": "BackendUnavailable", "message": "needs a GPU"}},
    )
    f = _decide(_fin(1), doc)
    assert isinstance(f, JobFailure)
    assert f.reason.startswith("the suite's code could not be imported: a: ImportError: cannot import mypkg.k:f")


def test_every_case_raising_is_a_failure_naming_each() -> None:
    doc = _doc(
        *({"id": f"c{i}", "status": "failed", "error": {"type": "RuntimeError", "message": "boom"}} for i in range(10))
    )
    f = _decide(_fin(1), doc)
    assert f.reason.startswith("every case failed (10): c0: RuntimeError: boom; c1:") and "; …" in f.reason


def test_a_suite_that_ran_is_a_result_even_with_failed_or_skipped_cases() -> None:
    oom = {"type": "OutOfMemoryError", "message": "CUDA out of memory"}
    doc = _doc({"id": "a", "status": "ok"}, {"id": "b", "status": "failed", "error": oom})
    assert _decide(_fin(1), doc) is doc
    skipped = _doc({"id": "a", "status": "skipped"})
    assert _decide(_fin(0), skipped) is skipped


def test_reasons_fit_the_service_and_keep_their_head() -> None:
    text = with_output("HEAD", [f"{i:04d} " + "x" * 390 for i in range(100)])
    assert len(text) <= REASON_MAX_CHARS and text.startswith("HEAD\nlast ") and text.endswith("x")
    assert "0099 " in text and "0000 " not in text


def _read(folder: Path, name: str) -> ResultDocument | DocumentError | None:
    with handback.Folder(folder) as job:
        return read_document(job, name)


def test_read_document(tmp_path: Path) -> None:
    assert _read(tmp_path, "none.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    bad = _read(tmp_path, "bad.json")
    assert isinstance(bad, DocumentError) and str(bad).startswith("/job/bad.json: not JSON")
    (tmp_path / "list.json").write_text("[1]")
    assert "a result document is a JSON object" in str(_read(tmp_path, "list.json"))
    broken = json.loads(H200_RESULT.read_text())
    broken["cases"][0]["latency_us"]["median"] = -1.0
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    refused = _read(tmp_path, "broken.json")
    assert isinstance(refused, DocumentError) and str(tmp_path) not in str(refused)
    assert "cases.0.latency_us.median: Input should be greater than or equal to 0" in str(refused)
    ok = _read(H200_RESULT.parent, H200_RESULT.name)
    assert isinstance(ok, ResultDocument) and ok == parse_result(json.loads(H200_RESULT.read_text()))


def test_a_document_that_is_a_link_a_fifo_or_a_bomb_is_refused_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"schema": "the host file"}')
    job = tmp_path / "job"
    (job / "out").mkdir(parents=True)
    (job / "out" / "result.json").symlink_to(secret)
    assert "a symbolic link" in str(_read(job, "out/result.json"))
    (job / "out" / "result.json").unlink()
    os.mkfifo(job / "out" / "result.json")  # opening it for reading would block forever
    assert "a FIFO, not a regular file" in str(_read(job, "out/result.json"))
    (job / "out" / "result.json").unlink()
    (job / "out").rmdir()
    (job / "out").symlink_to(tmp_path)  # a link on the way, not only at the end
    assert str(_read(job, "out/secret")).endswith("/job/out: not a folder (a link or a file): not followed")
    (job / "out").unlink()
    (job / "out").mkdir()
    with gzip.open(job / "out" / "result.json", "wb", compresslevel=9) as f:  # ~300 KB inflating to 300 MB
        for _ in range(300):
            f.write(b" " * (1024 * 1024))
    assert (job / "out" / "result.json").stat().st_size < 1024 * 1024
    bomb = _read(job, "out/result.json")
    assert isinstance(bomb, DocumentError) and "inflates past the" in str(bomb)
    os.link(job / "out" / "result.json", job / "hard")  # a second name for a file: not read
    assert "links: not read" in str(_read(job, "hard"))


def test_a_document_its_model_refuses_is_a_failure_that_says_why() -> None:
    refused = DocumentError("result.json: invalid result document: run.mode: Input should be 'cuda' or 'cpu'")
    f = _decide(_fin(0, tail=["done"]), refused)
    assert isinstance(f, JobFailure) and not f.retry and not f.timed_out
    assert f.reason.startswith(
        "the profiler exited with code 0 and wrote no valid result document: result.json: invalid result document:"
        " run.mode: Input should be 'cuda' or 'cpu'"
    )


def test_a_document_json_refuses_is_the_jobs_failure_never_the_workers(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "result.json").write_bytes(b'{"schema": ' + b"9" * 5000 + b"}")  # past int's digit limit
    read = _read(tmp_path, "out/result.json")
    assert isinstance(read, DocumentError) and "not JSON a document may hold" in str(read)
