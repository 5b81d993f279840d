"""The exceptions of ``attnprof.core``, documented in one place.

``AttnprofError``
    base of everything below; ``str()`` is a message a person can act on.
``SuiteError``
    a suite file is unreadable or invalid; ``key`` names the offending key (``cases[1].head_dim``).
``DocumentError``
    a result or comparison document is unreadable, of the wrong schema, or invalid.
``DeviceError``
    the device asked for is not there (``--device cuda`` without a GPU).
``CountersUnavailable``
    a counter pass was asked for but Nsight Compute is missing or cannot read counters.
"""

from __future__ import annotations


class AttnprofError(Exception):
    """Base class of every error raised by ``attnprof.core``."""


class SuiteError(AttnprofError):
    """An invalid suite file. ``key`` is the dotted path of the offending key, or ``None``."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        self.key = key
        self.source = source
        self.detail = message
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}" if key else f"{where}{message}")


class DocumentError(AttnprofError):
    """An unreadable or invalid result/comparison document."""


class DeviceError(AttnprofError):
    """The requested device is not available."""


class CountersUnavailable(AttnprofError):
    """Hardware counters were requested but cannot be read on this host."""
