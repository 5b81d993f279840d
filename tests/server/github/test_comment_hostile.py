"""The PR comment with hostile text in every field a user controls, rendered by a real GitHub-flavoured markdown
renderer (cmark-gfm, through ``cmarkgfm``, with GitHub's extensions: tables, autolinks, strikethrough, the tag filter;
raw HTML let through, so that any that got in shows). Whatever the names, branches, notes and output hold, the
rendered comment has only the service's own structure: one headline, no user heading, link, image, mention, raw HTML
or table cell of its own, and one hidden marker, the first line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from cmarkgfm.cmark import Options, markdown_to_html_with_extensions

from attnprof.core.analysis import compare
from attnprof.core.documents.comparison import ComparisonDocument, Finding, SoftwareChange
from attnprof.core.documents.result import CaseError, ResultDocument
from attnprof.server.github.budget import COMPACT_BUDGET_CHARS
from attnprof.server.github.comment import MARKER_PREFIX, CommentInput, marker, render
from attnprof.server.github.markdown import code, text
from tests.core.paired_docs import paired_comparison
from tests.server.github.test_comment import _docs, _input

PUBLIC_URL = "https://perf.example/"
CANARY = "EVIL"
"""Every hostile string holds it: where it shows outside code, a user's text is in that place."""
HOSTILE = [
    "EVIL\n````\n## ✅ pass\n````",
    "## ✅ pass EVIL",
    "@org/team EVIL",
    "[EVIL](http://evil.example/x)",
    "![EVIL](http://evil.example/t.png)",
    "<img src=http://evil.example/t.png> EVIL",
    "<b>EVIL</b><script>alert(1)</script><details open>",
    "<!-- attnprof:flash --> EVIL",
    "EVIL`one``two```three",
    "EVIL | pipe | \\| escaped |",
    "EVIL\n## heading\n- item\n1. ordered",
    "EVIL http://evil.example www.evil.example me@evil.example #12",
    "EVIL &lt;img src=x&gt; &#64;org/team &#x5b;x&#x5d;(http://evil.example)",
    "`EVIL` trailing backslash \\",
    "> EVIL quote",
    "--- EVIL",
    "    EVIL indented",
    "~~EVIL~~ *em* _em_ $x$",
    "EVIL\r\n<!-- attnprof:flash -->\r\n",
    "EVIL \u202eevil\u202c bidi",
]
BRANCH = "feat\n## ✅ pass\n@org/team\n<!-- attnprof:flash -->\n[EVIL](http://evil.example)"
TESTBED = "h200 | @org/team <img src=x> EVIL"
SUITE = "llama7b` ## ✅ pass [EVIL](http://evil.example)"
REASON = (
    "Traceback:\n````\n## ✅ pass\n@org/team [x](http://evil.example) ![](http://evil.example/t.png)\n"
    "<img src=http://evil.example/t.png>\n<!-- attnprof:flash -->\n``````\n## ✅ pass EVIL\n"
)

# What the service itself writes: these tags, one headline, its section titles, links to the dashboard only.
ALLOWED_TAGS = {
    "p",
    "h2",
    "h3",
    "h4",
    "ul",
    "li",
    "strong",
    "code",
    "pre",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "blockquote",
    "details",
    "summary",
    "a",
    "br",
}
SECTION_TITLES = ("Regressed cases, largest first", "Regressions and improvements", "Paired rounds per case")


def _gfm(markdown: str) -> str:
    return markdown_to_html_with_extensions(
        markdown,
        options=Options.CMARK_OPT_UNSAFE,
        extensions=["table", "autolink", "strikethrough", "tagfilter"],
    )


@dataclass
class _Node:
    tag: str
    attrs: dict[str, str | None]
    text: list[str] = field(default_factory=list)  # its text outside code and pre
    code: list[str] = field(default_factory=list)  # the text of each code element in it


class _Walk(HTMLParser):
    """Every element with the text it holds outside code (its own and its children's), every comment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[_Node] = []
        self.nodes: list[_Node] = []
        self.comments: list[str] = []
        self.loose: list[str] = []  # text outside code and pre, anywhere

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = _Node(tag, dict(attrs))
        self.nodes.append(node)
        if tag not in ("br", "img", "hr", "input"):
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        in_code = any(n.tag in ("code", "pre") for n in self.stack)
        if in_code:
            innermost = next(n for n in reversed(self.stack) if n.tag in ("code", "pre"))
            innermost.code.append(data)
            for node in self.stack:
                if node is not innermost:
                    node.code.append(data)
            return
        self.loose.append(data)
        for node in self.stack:
            node.text.append(data)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def _walk(markdown: str) -> _Walk:
    walk = _Walk()
    walk.feed(_gfm(markdown))
    walk.close()
    return walk


def _rename(doc: ResultDocument, cases: dict[str, str], kernels: dict[str, str]) -> ResultDocument:
    out = doc.model_copy(deep=True)
    for case in out.cases:
        case.id = cases[case.id]
        case.trace = "t)](http://evil.example) EVIL.json.gz"
        for k in case.kernels:
            k.key = kernels[k.key]
            k.occupancy_limiter = HOSTILE[k.key.__len__() % len(HOSTILE)]
    return out


def _hostile_docs() -> tuple[list[ResultDocument], ResultDocument, ComparisonDocument]:
    """The committed H200 runs with every case id and kernel key hostile, compared; then the comparison's words
    (notes, doubts, details, software, testbeds) and a broken case's error made hostile too."""
    baselines, candidate = _docs()
    case_ids = sorted({c.id for c in candidate.cases})
    keys = sorted({k.key for d in [*baselines, candidate] for c in d.cases for k in c.kernels})
    cases = {cid: f"{HOSTILE[i % len(HOSTILE)]} c{i}" for i, cid in enumerate(case_ids)}
    kernels = {key: f"{HOSTILE[i % len(HOSTILE)]} k{i}" for i, key in enumerate(keys)}
    baselines = [_rename(b, cases, kernels) for b in baselines]
    candidate = _rename(candidate, cases, kernels)
    broken = candidate.cases[-1]
    broken.status = "failed"
    broken.error = CaseError(type="Oops ## ✅ pass", message=REASON)
    doc = compare(baselines, candidate).model_copy(deep=True)
    doc.notes = [*HOSTILE[:6], *doc.notes]
    doc.suspect = HOSTILE[6:9]
    doc.testbed_mismatch = True
    doc.testbed_baseline = [TESTBED, HOSTILE[3]]
    doc.testbed_candidate = TESTBED
    doc.software = [SoftwareChange(name=h, baseline=h, candidate=HOSTILE[-1 - i]) for i, h in enumerate(HOSTILE[:4])]
    first = doc.findings[0]
    first.detail = HOSTILE[10]
    doc.findings += [
        Finding(case=first.case, metric="backend", status="regressed", verdict="fail", baseline=HOSTILE[2],
                candidate=HOSTILE[4], detail=HOSTILE[5]),
        Finding(case=first.case, metric="variance", status="regressed", verdict="warn", change=0.8,
                detail=HOSTILE[11]),
        Finding(case=first.case, metric="accuracy", status="regressed", verdict="fail", baseline=HOSTILE[8],
                candidate=HOSTILE[9], detail=HOSTILE[12]),
        Finding(case=broken.id, metric="status", status="regressed", verdict="fail", baseline="ok",
                candidate="failed", detail=HOSTILE[13]),
    ]  # fmt: skip
    return baselines, candidate, doc


def _hostile_input(**kw: object) -> CommentInput:
    baselines, candidate, doc = _hostile_docs()
    base: dict[str, object] = {
        "comparison": doc,
        "candidate": candidate,
        "baseline": baselines[0],
        "branch": BRANCH,
        "testbed": TESTBED,
        "suite_name": SUITE,
        "suite_path": None,
        "traces": None,
        "public_url": PUBLIC_URL,
    }
    base.update(kw)
    return _input(**base)


def _check(markdown: str, *, tables: bool = True) -> _Walk:
    """What holds of every comment, whatever it shows; returns the walk for more."""
    # one marker, the first line: no user text holds another
    assert markdown.splitlines()[0] == marker("flash")
    assert markdown.count(MARKER_PREFIX) == 1, "a second copy of the marker"
    walk = _walk(markdown)
    assert walk.comments == [" attnprof:flash "], walk.comments
    tags = {n.tag for n in walk.nodes}
    assert tags <= ALLOWED_TAGS, f"raw HTML or markup from user text: {sorted(tags - ALLOWED_TAGS)}"
    # headings: the headline once, the service's section titles, a case's heading (its id in code)
    headings = [n for n in walk.nodes if n.tag in ("h1", "h2", "h3", "h4", "h5", "h6")]
    assert [h.tag for h in headings].count("h2") == 1
    for h in headings:
        words = "".join(h.text)
        assert CANARY not in words, f"user text outside code in a heading: {words!r}"
        if h.tag == "h2":
            assert re.match(r"^\s*\S+ attnprof ", words), words
        if h.tag == "h3":
            assert words.startswith(SECTION_TITLES), words
        if h.tag == "h4":
            assert h.code, f"a case heading names its case in code: {words!r}"
    # links: only the dashboard's, their words the service's
    for a in (n for n in walk.nodes if n.tag == "a"):
        assert str(a.attrs.get("href") or "").startswith(PUBLIC_URL), a.attrs
        assert CANARY not in "".join(a.text)
    assert not [n for n in walk.nodes if n.tag == "img"]
    for n in walk.nodes:
        if n.tag in ("strong", "summary", "th", "li", "em", "del"):
            assert CANARY not in "".join(n.text) or n.tag == "li", f"user text as {n.tag}: {n.text}"
    # text outside code: no mention, no issue reference, no bare link GitHub would make after markdown
    loose = "".join(walk.loose)
    assert not re.search(r"(?<![\w`])@[A-Za-z0-9]", loose), "a mention outside code"
    assert not re.search(r"#[0-9]", loose), "an issue reference outside code"
    assert "://" not in loose and not re.search(r"(?i)www\.", loose), "a bare link outside code"
    # tables: every row has its header's cells, and no cell holds a piece of a name cut off by a pipe
    if tables:
        _tables(walk)
    _table_rows(markdown)
    return walk


def _tables(walk: _Walk) -> None:
    table: list[_Node] = []
    tables: list[list[_Node]] = []
    for n in walk.nodes:
        if n.tag == "table":
            table = []
            tables.append(table)
        elif n.tag in ("tr", "th", "td") and tables:
            table.append(n)
    assert tables, "the comment has its tables"
    shown = {code(h, 120).strip("`").strip() for h in _names()}
    for rows in tables:
        widths: list[int] = []
        for n in rows:
            if n.tag == "tr":
                widths.append(0)
            else:
                widths[-1] += 1
        assert len(set(widths)) == 1, f"a row with another number of cells: {widths}"
        for cell in (n for n in rows if n.tag == "td" and CANARY in "".join(n.code)):
            spans = "".join(cell.code)
            assert any(s in spans for s in shown), f"a name cut in a table: {spans!r}"


def _table_rows(markdown: str) -> None:
    """Each table's rows split into as many cells as its header, by GFM's rule: a ``|`` is a cell's border unless a
    backslash comes right before it (inside code spans too). GFM drops a row's extra cells from the HTML, so a name
    that a pipe split would show only as a shorter cell: the source tells."""
    width = None
    for line in markdown.split("\n"):
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.split(r"(?<!\\)\|", line.strip())) - 2
        width = cells if width is None else width
        assert cells == width, f"a row of {cells} cells in a table of {width}: {line!r}"


def _names() -> list[str]:
    """Every name a table may show: the case ids, the kernel keys, the findings' values."""
    return [*HOSTILE, *(f"{h} {kind}{i}" for kind in "ck" for i, h in enumerate(HOSTILE * 3))]


def test_hostile_names_notes_and_output_render_as_text() -> None:
    markdown = render(_hostile_input())
    walk = _check(markdown)
    # the user's words are there, as text: in code, or escaped prose
    codes = "".join(c for n in walk.nodes if n.tag == "code" for c in n.code)
    assert "@org/team" in codes and "[EVIL](http://evil.example/x)" in codes and "<img src=" in codes
    assert "feat ## ✅ pass @org/team" in codes, "the branch on one line, in code"
    loose = "".join(walk.loose)
    assert "## ✅ pass EVIL" in loose.replace("\u200b", ""), "a note as text"
    assert "<b>EVIL</b>" in loose, "raw HTML shown as text"
    # the failure's output in one block (per finding that shows it), whole, its fence longer than its own backticks
    pre = [n for n in walk.nodes if n.tag == "pre" and "Traceback" in "".join(n.code)]
    assert pre and all("``````\n## ✅ pass EVIL" in "".join(p.code) for p in pre)


def test_the_compact_form_is_as_safe() -> None:
    _check(render(_hostile_input(), budget_chars=COMPACT_BUDGET_CHARS, kernel_tables=False), tables=False)


@pytest.mark.parametrize("status", ["failed", "timed_out", "cancelled"])
def test_a_job_without_a_verdict_shows_its_hostile_reason_in_one_block(status: str) -> None:
    inp = _hostile_input(status=status, comparison=None, candidate=None, baseline=None, reason=REASON)
    markdown = render(inp)
    walk = _walk(markdown)
    assert markdown.count(MARKER_PREFIX) == 1 and walk.comments == [" attnprof:flash "]
    assert {n.tag for n in walk.nodes} <= ALLOWED_TAGS
    assert [n.tag for n in walk.nodes].count("h2") == 1 and not [n for n in walk.nodes if n.tag == "h3"]
    (why,) = [n for n in walk.nodes if n.tag == "pre" and "Traceback" in "".join(n.code)]
    assert "".join(why.code).rstrip("\n").endswith("``````\n## ✅ pass EVIL")
    assert CANARY not in "".join(walk.loose)
    for a in (n for n in walk.nodes if n.tag == "a"):
        assert str(a.attrs.get("href")).startswith(PUBLIC_URL)


def test_a_paired_comparison_with_hostile_case_ids() -> None:
    doc = paired_comparison().model_copy(deep=True)
    cases = dict.fromkeys(f.case for f in doc.findings)
    renamed = {case: f"{HOSTILE[(3 * i) % len(HOSTILE)]} c{i}" for i, case in enumerate(cases)}
    for f in doc.findings:
        f.case = renamed[f.case]
        f.stopped_by = f.stopped_by if f.stopped_by != "same" else "[EVIL](http://evil.example) @org/team"
    _check(render(_input(comparison=doc, candidate=None, baseline=None, branch=BRANCH, testbed=TESTBED)))


def test_the_escapes_read_back_as_the_text_they_stand_for() -> None:
    """What a reader sees is what the user wrote, on one line, less the invisible breaks and the controls."""
    for h in HOSTILE:
        one_line = re.sub(r"[\r\n\u202e\u202c]", " ", h).replace("<!--", "<!\u200b--")
        walk = _walk(f"a {code(h)} b")
        assert "".join(n for c in walk.nodes if c.tag == "code" for n in c.code) == one_line, h
        walk = _walk(f"a {text(h)} b")
        shown = "".join(walk.loose).strip().replace("\u200b", "")
        assert shown == f"a {one_line.lstrip()} b".replace("\u200b", ""), h
        assert [n.tag for n in walk.nodes] == ["p"], h
