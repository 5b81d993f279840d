"""The suite file's path in its repository, as a job carries it: what ``attnprof submit`` sends and the service
stores, so that a job's page can print the command that profiles the same suite in a checkout
(``attnprof profile <path>``). One rule, judged the same way by the client and the service. Framework-free.

A suite path is relative to the repository's root, written with ``/``: no leading ``/``, no drive letter, no
backslash, no ``..`` part, no empty part, no control character, at most ``SUITE_PATH_CHARS`` characters. A leading
``./`` is dropped.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

SUITE_PATH_CHARS = 500


class SuitePathError(ValueError):
    """The path breaks the rule; the message says which part and what is allowed."""


def check_suite_path(raw: str) -> str:
    """``raw`` as stored (a leading ``./`` dropped), or ``SuitePathError`` saying what is wrong with it."""
    path = raw.strip()
    while path.startswith("./"):
        path = path[2:]
    allowed = f"a path relative to the repository's root, with '/' between its parts, at most {SUITE_PATH_CHARS} "
    allowed += "characters"
    if not path:
        raise SuitePathError(f"empty; {allowed}")
    if len(path) > SUITE_PATH_CHARS:
        raise SuitePathError(f"{len(path)} characters; {allowed}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise SuitePathError(f"holds a control character; {allowed}")
    if "\\" in path:
        raise SuitePathError(f"holds a backslash; {allowed}")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":" and path[0].isalpha()):
        raise SuitePathError(f"{path[:60]!r} is absolute; {allowed}")
    parts = path.split("/")
    if ".." in parts:
        raise SuitePathError(f"{path[:60]!r} has a '..' part (it would leave the repository); {allowed}")
    if any(part in ("", ".") for part in parts):
        raise SuitePathError(f"{path[:60]!r} has an empty or '.' part; {allowed}")
    return path


SuitePath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=SUITE_PATH_CHARS,
        description="the suite file's path relative to the repository's root, with '/' between its parts (no "
        "leading '/', no '..' part); optional",
    ),
    AfterValidator(check_suite_path),
]
"""A suite path in a pydantic model: refused with the rule's message, which names what is wrong."""
