"""Checks on a source bundle (tar.gz) on arrival: size, gzip, and every member (docs/architecture.md, "Bounded
inputs" and "Source bundles").

The rules live in ``attnprof.contract.bundle``, and the check reads the archive through the same walk as the
profile worker's unpacking (member list and file data), so a bundle accepted here is one the worker unpacks;
here a refusal becomes the service's error: 413 for a size limit, 422 for anything else.
"""

from __future__ import annotations

from attnprof.contract import bundle as archive
from attnprof.server.errors import InvalidPayload, PayloadTooLarge


def check_bundle(
    data: bytes, *, max_bytes: int, max_unpacked_bytes: int, max_members: int, field: str = "bundle"
) -> int:
    """Validate a tar.gz source bundle sent as form field ``field`` (named first in a refusal: a paired job sends
    two); returns its member count. Raises ``PayloadTooLarge``/``InvalidPayload``."""
    try:
        return archive.check(data, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members)
    except archive.BundleRefused as exc:
        message = str(exc) if field == "bundle" else f"{field}: {str(exc).removeprefix('bundle: ')}"
        raise (PayloadTooLarge if exc.too_large else InvalidPayload)(message) from exc
