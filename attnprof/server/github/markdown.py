"""What a user chose (suite, case, kernel, branch, project and testbed names, reasons, a run's output), written into
GitHub markdown so that it stays the text it is: never a heading, a list, a link, an image, a mention, raw HTML, a
table's cell border, or a copy of the comment's hidden marker.

Pure: no database, no network. Three forms, each for the place it goes:

- ``code``: an inline code span, for a name. Its fence is one backtick longer than the longest run of backticks in
  the text, so no backtick in it ends the span; inside a code span GitHub links, mentions and renders nothing.
- ``text``: prose (a note, a detail, a phase's name). Every character that starts inline markup anywhere in a line
  (``\\ ` * ~ [ ] < & | $``, and ``_`` but inside a word, where it cannot) is escaped with a backslash, and so is
  its first character when it is punctuation (``>`` starts a quote only there), or the ``.`` or ``)`` of a leading
  number, so that the text starts no block (a heading, a list, a quote, a rule) wherever its line begins; leading
  spaces go (four would start code).
  GitHub finds mentions, references and bare links in the text *after* markdown, where a backslash no longer is: a
  zero-width space after each ``@`` and ``#`` and inside each ``://`` and ``www.`` breaks ``@org/team``, ``#12``,
  ``http://...`` and ``www.example.com`` without changing what a reader sees.
- ``fenced``: a block of lines (a failure's output), fenced with more backticks than any run of them inside.

All three turn line breaks and other control characters into spaces (a block keeps its line breaks), so a name
never starts a new block; they drop the bidirectional controls that would make text read other than it is stored,
and break the opening of an HTML comment, so user text never holds the marker the service finds its comment by.
In a table (``table=True``) a ``|`` is escaped as GFM asks, inside code spans too.
"""

from __future__ import annotations

import re

MARKER_OPEN = "<!--"
_BROKEN_OPEN = "<!\u200b--"
_ZWSP = "\u200b"

# C0 and C1 controls (line breaks among them), Unicode's line and paragraph separators, and the bidirectional
# controls (embeddings, overrides, isolates, marks): in a name each becomes a space.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# The same but the line feed, for a block (its lines are kept); a tab is kept too, as code shows it.
_BLOCK_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Characters that start inline markup wherever they are (emphasis, code, strikethrough, links and images, raw HTML
# and autolinks, entities, table cells, math); ``_`` only where it is not inside a word. An entity is markup too: it
# would hand GitHub's mention and link filters, which read the rendered text, an ``@`` or a ``:`` not written.
_INLINE = re.compile(r"([\\`*~\[\]<&|$])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_FIRST_PUNCTUATION = re.compile(r"^([!-/:-@\[-`{-~])")
_LEADING_NUMBER = re.compile(r"^([0-9]{1,9})([.)])")
_BACKTICKS = re.compile(r"`+")
_LINKS = re.compile(r"(?i)(www)(\.)|(:)(//)")


def clip(text: str, limit: int | None) -> str:
    """``text``, cut to ``limit`` characters with "…" when longer (None: whole)."""
    if limit is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def no_marker(text: str) -> str:
    """``text`` with every HTML comment opening broken by a zero-width space: no user text holds the marker."""
    return text.replace(MARKER_OPEN, _BROKEN_OPEN)


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` on one line: control characters as spaces, bidirectional controls gone, cut at ``limit``, and no
    HTML comment opening."""
    return no_marker(clip(_CONTROL.sub(" ", text), limit))


def code(value: object, limit: int | None = None, *, table: bool = False) -> str:
    """``value`` (as ``str``) as one inline code span, on one line, cut at ``limit`` characters. ``table``: for a
    table's cell (its pipes escaped)."""
    inner = one_line(str(value), limit) or " "
    longest = max((len(run) for run in _BACKTICKS.findall(inner)), default=0)
    fence = "`" * (longest + 1)
    # A span that starts or ends with a backtick or a space needs a space inside each end, which the reader does not
    # see: CommonMark strips one from each side when both are there.
    if inner[0] in "` " or inner[-1] in "` ":
        inner = f" {inner} "
    if table:
        inner = inner.replace("|", "\\|")
    return f"{fence}{inner}{fence}"


def text(value: object, limit: int | None = None) -> str:
    """``value`` (as ``str``) as plain prose on one line, cut at ``limit`` characters: no markup, no mention, no
    reference, no bare link. Safe in a table's cell too (a ``|`` is escaped like any punctuation)."""
    plain = one_line(str(value), limit).lstrip()
    escaped = _INLINE.sub(lambda m: "\\" + m[0], plain)
    escaped = _LEADING_NUMBER.sub(r"\1\\\2", escaped)
    if not escaped.startswith("\\"):
        escaped = _FIRST_PUNCTUATION.sub(r"\\\1", escaped)
    escaped = _LINKS.sub(lambda m: f"{m[1]}{_ZWSP}{m[2]}" if m[1] else f"{m[3]}{_ZWSP}{m[4]}", escaped)
    return escaped.replace("@", "@" + _ZWSP).replace("#", "#" + _ZWSP)


def block_text(value: str) -> str:
    """``value`` for a code block: its lines kept (CR LF and CR as LF), other control characters as spaces, the
    bidirectional controls gone, no HTML comment opening."""
    lines = value.replace("\r\n", "\n").replace("\r", "\n")
    return no_marker(_BLOCK_CONTROL.sub(" ", lines))


def fence_for(body: str, char: str = "`") -> str:
    """The fence for a code block around ``body``: longer than any run of ``char`` in it, three at least."""
    longest = max((len(run) for run in re.findall(re.escape(char) + "+", body)), default=0)
    return char * max(3, longest + 1)


def fenced(body: str, info: str = "") -> list[str]:
    """``body`` (any text, any lines) as a fenced code block's lines, ``info`` its language (``text``, ``sh``)."""
    inner = block_text(body)
    fence = fence_for(inner)
    return [f"{fence}{info}", *inner.split("\n"), fence]
