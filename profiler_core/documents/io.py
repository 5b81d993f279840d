"""Reading and writing result documents (JSON, optionally gzip), and validating comparison documents."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from profiler_core.documents.comparison import COMPARISON_SCHEMA, ComparisonDocument
from profiler_core.documents.result import RESULT_SCHEMA, ResultDocument
from profiler_core.errors import DocumentError

_Doc = TypeVar("_Doc", ResultDocument, ComparisonDocument)


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if raw[:2] == b"\x1f\x8b":
        # A truncated stream raises EOFError and a corrupt one zlib.error, neither an OSError.
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DocumentError(f"{path}: not a valid gzip file: {exc}") from exc
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{path}: not JSON: {exc}") from exc
    except RecursionError as exc:  # json's decoder recurses once per nested array or object
        raise DocumentError(f"{path}: JSON nested too deeply to be a result document") from exc


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
