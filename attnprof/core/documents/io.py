"""Reading and writing result documents (JSON, optionally gzip), and validating comparison documents."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from attnprof.core.documents.comparison import COMPARISON_SCHEMA, ComparisonDocument
from attnprof.core.documents.result import RESULT_SCHEMA, ResultDocument
from attnprof.core.errors import DocumentError

_Doc = TypeVar("_Doc", ResultDocument, ComparisonDocument)

# The most a document may hold once inflated, in bytes: far above any real suite's (a 10,000-case document is a
# few tens of MB), far below what a small gzip bomb inflates to.
DOCUMENT_MAX_BYTES = 512 * 1024 * 1024
_STEP_BYTES = 1024 * 1024


def inflate(raw: bytes, *, max_bytes: int = DOCUMENT_MAX_BYTES, source: str = "<document>") -> bytes | bytearray:
    """``raw`` as it is, or inflated when it is gzip, never past ``max_bytes`` (``DocumentError`` beyond: the stream
    is inflated 1 MiB at a time into one buffer, so a bomb costs at most ``max_bytes`` and a step of memory)."""
    if raw[:2] != b"\x1f\x8b":
        if len(raw) > max_bytes:
            raise DocumentError(f"{source}: {len(raw):,} bytes, over the {max_bytes:,} a document may hold")
        return raw
    out = bytearray()
    stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    pending = raw
    try:
        while True:
            want = min(_STEP_BYTES, max_bytes + 1 - len(out))
            chunk = stream.decompress(pending, want)
            out += chunk
            if len(out) > max_bytes:
                raise DocumentError(f"{source}: inflates past the {max_bytes:,} bytes a document may hold")
            pending = stream.unconsumed_tail
            if stream.eof:
                break
            # Short of what was asked with no input left: the stream ended before its end (a full step may still
            # hold output back, which the next call with no input gives).
            if not pending and len(chunk) < want:
                raise DocumentError(f"{source}: not a valid gzip file: the stream is truncated")
    except zlib.error as exc:
        raise DocumentError(f"{source}: not a valid gzip file: {exc}") from exc
    return out


def decode_json(raw: bytes, *, source: str, max_bytes: int = DOCUMENT_MAX_BYTES) -> Any:
    """The JSON value in ``raw`` (plain or gzip, inflated within ``max_bytes``), or ``DocumentError``."""
    text = inflate(raw, max_bytes=max_bytes, source=source)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{source}: not JSON: {exc}") from exc
    except RecursionError as exc:  # json's decoder recurses once per nested array or object
        raise DocumentError(f"{source}: JSON nested too deeply to be a result document") from exc
    except ValueError as exc:  # an integer past Python's digit limit, and any other value json refuses
        raise DocumentError(f"{source}: not JSON a document may hold: {exc}") from exc
    except MemoryError as exc:
        raise DocumentError(f"{source}: too large to read as a document") from exc


def _read_json(path: Path) -> Any:
    try:
        with path.open("rb") as f:
            raw = f.read(DOCUMENT_MAX_BYTES + 1)
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return decode_json(raw, source=str(path))


def _first_errors(exc: ValidationError, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "(document)"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _parse(data: Any, model: type[_Doc], schema: str, what: str, source: str) -> _Doc:
    if not isinstance(data, dict):
        raise DocumentError(f"{source}: a {what} document is a JSON object, got {type(data).__name__}")
    found = data.get("schema")
    if found != schema:
        raise DocumentError(f"{source}: schema is {found!r}, expected {schema!r}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(f"{source}: invalid {what} document: {_first_errors(exc)}") from exc


def parse_result(data: Any, *, source: str = "<document>") -> ResultDocument:
    """Validate a decoded JSON value as a result document, or raise ``DocumentError``."""
    return _parse(data, ResultDocument, RESULT_SCHEMA, "result", source)


def parse_comparison(data: Any, *, source: str = "<document>") -> ComparisonDocument:
    """Validate a decoded JSON value as a comparison document, or raise ``DocumentError``."""
    return _parse(data, ComparisonDocument, COMPARISON_SCHEMA, "comparison", source)


def load_result(path: str | Path) -> ResultDocument:
    """Read a result document from ``path`` (plain or gzip JSON)."""
    p = Path(path)
    return parse_result(_read_json(p), source=str(p))


def write_result(doc: ResultDocument, path: str | Path) -> None:
    Path(path).write_text(doc.to_json() + "\n")
