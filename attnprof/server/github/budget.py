"""What GitHub takes in one issue comment, and the budget the PR comment is written to.

GitHub refuses an issue comment whose body has more than 65,536 characters: 422 Validation Failed, with the error
"Body is too long (maximum is 65536 characters)" (the REST API's create and update an issue comment). The comment
is composed to ``COMMENT_BUDGET_CHARS``, below that limit, counted as ``github_chars`` counts.
"""

from __future__ import annotations

GITHUB_COMMENT_MAX_CHARS = 65_536
"""GitHub's limit on an issue comment's body, in characters."""

COMMENT_BUDGET_CHARS = 60_000
"""What the PR comment may hold: GitHub's limit less a margin of 5,536 characters (8%), so that a count that differs
from GitHub's by a few characters per line (line endings sent as CR LF by a proxy, an emoji counted twice) still
fits."""

COMPACT_BUDGET_CHARS = 16_000
"""What the comment sent after GitHub refused a body as too long may hold: the lines only, no tables."""


def github_chars(text: str) -> int:
    """The characters of ``text`` as GitHub counts them, or a few more: UTF-16 code units. A character outside the
    Basic Multilingual Plane (most emoji) counts twice, as in a JavaScript string; Ruby, which GitHub's API runs on,
    counts it once. Never less than GitHub's count, whichever of the two it uses."""
    return len(text.encode("utf-16-le")) // 2


class Budget:
    """Characters left for the comment's parts; ``take`` adds a part only when all of it fits."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def cost(self, lines: list[str]) -> int:
        """What ``lines`` take once joined into the body: each line and its newline."""
        return sum(github_chars(text) + 1 for text in lines)

    def take(self, lines: list[str]) -> bool:
        cost = self.cost(lines)
        if cost > self.left:
            return False
        self.left -= cost
        return True
