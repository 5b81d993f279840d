"""The hand-made hostile inputs, as data: each case a request and the refusal it must get (the statuses it may get,
and the words of which one must be in the error's ``detail``: the field it names). ``bad_inputs.py`` sends them, in
this order, each made ready by ``sender``.

A request's path is a template over the scenario's objects (``PATH_NAMES``) and its token a name in the scenario's
token table (``TOKEN_NAMES``; ``None``: no Authorization header). Bodies are built by zero-argument functions, called
when the catalogue is made ready (the gzip bomb and the 60 MB bundle take a few seconds), never at import.
"""

from __future__ import annotations

import gzip
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from bench.reliability.common import PARKED, filled
from bench.reliability.payloads import DEEP, MIB, gzip_bomb, many_members, streamed, tar_members
from bench.reliability.suites import small_suite

# Project a's routes, its uploaded run and one of that run's traces, a claimed job of a's, a's read token's id.
PATH_NAMES = ("base", "run_id", "trace", "job_id", "read_token_id")
# a's tokens of each role, the claimed job's token, a revoked and an expired token of a's, two made-up ones.
TOKEN_NAMES = ("admin", "submit", "read", "job", "revoked", "expired", "foreign", "long")

Body = Callable[[], str | bytes]
Answer = dict[str, Any]


# --- bodies --------------------------------------------------------------------------------------------------


def suite(old: str = "", new: str = "", then: str = "") -> Body:
    """The small suite (``small_suite(0.1)``), its first ``old`` replaced by ``new``, ``then`` appended."""

    def build() -> str:
        text = small_suite(0.1)
        return (text.replace(old, new, 1) if old else text) + then

    return build


def grid(n_batch: int, n_seq: int) -> Body:
    """The small suite with its first case a grid of ``n_batch`` batch sizes by ``n_seq`` sequence lengths."""
    batches, lengths = list(range(1, n_batch + 1)), list(range(16, 16 + n_seq))
    return suite("batch = 1\nq_heads = 2\nseq_q = 64", f"batch = {batches}\nq_heads = 2\nseq_q = {lengths}")


def members(*found: tuple[str, str, bytes | str | None]) -> Body:
    """A bundle of these members (``payloads.tar_members``)."""
    return partial(tar_members, *found)


def upload() -> dict[str, Any]:
    """A valid upload's body: the H200 result document of the tests, with a branch and a commit."""
    from tests.server import documents as docs

    return docs.upload_body(docs.h200())


def worker_result() -> dict[str, Any]:
    """A valid result a worker posts for its claimed job (attempt 1)."""
    from tests.server import documents as docs

    return {"attempt": 1, "result": docs.h200()}


def with_literal(document: Callable[[], dict[str, Any]], place: tuple[str | int, ...], literal: str) -> Body:
    """``document`` as JSON text with ``literal`` (NaN, Infinity, 1e309: not JSON, but what Python's json reads)
    at ``place``."""

    def build() -> str:
        body = document()
        node: Any = body
        for key in place[:-1]:
            node = node[key]
        node[place[-1]] = "__literal__"
        return json.dumps(body).replace('"__literal__"', literal)

    return build


def changed(document: Callable[[], dict[str, Any]], change: Callable[[dict[str, Any]], object] | None = None) -> Body:
    """``document`` as JSON text, once ``change`` has changed it."""

    def build() -> str:
        body = document()
        if change is not None:
            change(body)
        return json.dumps(body)

    return build


def deep_params(body: dict[str, Any]) -> None:
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    body["result"]["cases"][0]["params"]["deep"] = deep


def negative_samples(body: dict[str, Any]) -> None:
    lat = body["result"]["cases"][0]["latency_us"]
    lat["samples"] = [-abs(v) for v in lat["samples"]]


def unknown_schema(body: dict[str, Any]) -> None:
    body["result"]["schema"] = "attnprof.result/v999"


def text(value: str | bytes) -> Body:
    return lambda: value


SMALL_SUITE = suite()
TRACE_GZ = partial(gzip.compress, b'{"traceEvents": []}')
NESTED = "[" * DEEP + "]" * DEEP
JSON = {"Content-Type": "application/json"}
GZIP = {"Content-Type": "application/gzip"}


# --- requests ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A job submitted to project a (multipart, a's submit token): the small suite, a testbed with no worker, branch
    ``main``, commit ``abc123``; ``spec`` ``None`` leaves the suite file out."""

    spec: Body | None = SMALL_SUITE
    bundle: Body | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One HTTP request."""

    method: str
    path: str
    token: str | None
    content: Body | None = None
    json: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stream:
    """200 MB of body sent 1 MiB at a time over a raw socket with a's submit token, stopping at the answer
    (``payloads.streamed``): declared with Content-Length, or chunked."""

    method: str
    path: str
    content_type: str
    chunked: bool = False
    total: int = 200 * 10**6


@dataclass(frozen=True)
class Case:
    """One hostile input: its name (the report's row), its group, the request, the statuses it may get (all 4xx),
    and the words of which one (case-insensitive) must be in the error's detail: the field it names."""

    name: str
    group: str
    request: Job | Call | Stream
    statuses: tuple[int, ...]
    words: tuple[str, ...]


# Shorthands for the requests many cases make.


def _upload(body: Body, ctype: str = "application/json") -> Call:
    """A result document posted to project a with a's submit token."""
    return Call("POST", "{base}/results", "submit", content=body, headers={"Content-Type": ctype})


def _worker_result(body: Body) -> Call:
    return Call("POST", "/internal/jobs/{job_id}/result", "job", content=body, headers=JSON)


def _runs(token: str | None, **params: str) -> Call:
    return Call("GET", "{base}/runs", token, params=params or None)


MEDIAN = ("result", "cases", 0, "latency_us", "median")
# The words of which one the detail must hold: a bundle refused, a JSON body nested too deep.
BUNDLE, NESTING = ("bundle",), ("nest", "deep", "depth")

CASES: tuple[Case, ...] = (
    # bundles
    Case(
        "bundle: path traversal (../evil.py)",
        "bundle",
        Job(bundle=members(("../evil.py", "file", b"x"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: absolute path (/etc/cron.d/evil)",
        "bundle",
        Job(bundle=members(("/etc/cron.d/evil", "file", b"x"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: symbolic link to /etc/shadow",
        "bundle",
        Job(bundle=members(("pkg/s", "symlink", "/etc/shadow"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: hard link to /etc/passwd",
        "bundle",
        Job(bundle=members(("pkg/h", "hardlink", "/etc/passwd"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: character device (/dev/null's numbers)",
        "bundle",
        Job(bundle=members(("pkg/null", "chardev", None))),
        (422,),
        BUNDLE,
    ),
    Case("bundle: FIFO", "bundle", Job(bundle=members(("pkg/fifo", "fifo", None))), (422,), BUNDLE),
    Case(
        "bundle: the same member twice",
        "bundle",
        Job(bundle=members(("pkg/m.py", "file", b"1"), ("pkg/m.py", "file", b"2"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: the same member spelt two ways (./pkg//m.py)",
        "bundle",
        Job(bundle=members(("pkg/m.py", "file", b"1"), ("./pkg//m.py", "file", b"2"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: a file, then a member under it",
        "bundle",
        Job(bundle=members(("pkg", "file", b"1"), ("pkg/m.py", "file", b"2"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: a directory, then a file of its name",
        "bundle",
        Job(bundle=members(("pkg", "dir", None), ("pkg", "file", b"1"))),
        (422,),
        BUNDLE,
    ),
    Case(
        "bundle: gzip bomb (600 MiB of zeros in ~0.6 MB)",
        "bundle",
        Job(bundle=partial(gzip_bomb, 600 * MIB)),
        (413,),
        BUNDLE,
    ),
    Case("bundle: 10,001 members", "bundle", Job(bundle=partial(many_members, 10_001)), (422,), BUNDLE),
    Case("bundle: not gzip", "bundle", Job(bundle=partial(secrets.token_bytes, 4096)), (422,), BUNDLE),
    Case("bundle: empty archive", "bundle", Job(bundle=members()), (422,), BUNDLE),
    Case(
        "bundle: 60 MB (limit 50 MiB)",
        "bundle",
        Job(bundle=partial(secrets.token_bytes, 60 * 10**6)),
        (413,),
        ("bundle", "bytes"),
    ),
    # bodies
    Case(
        "200 MB multipart body, Content-Length declared",
        "body",
        Stream("POST", "{base}/jobs", "multipart/form-data; boundary=x0x0x0"),
        (413,),
        ("bytes", "limit", "body"),
    ),
    Case(
        "200 MB JSON upload, Content-Length declared",
        "body",
        Stream("POST", "{base}/results", "application/json"),
        (413,),
        ("bytes", "limit", "body"),
    ),
    Case(
        "200 MB JSON upload, chunked (no length)",
        "body",
        Stream("POST", "{base}/results", "application/json", chunked=True),
        (413,),
        ("bytes", "limit", "body"),
    ),
    Case(
        "200 MB trace upload (limit 64 MiB)",
        "body",
        Stream("PUT", "{base}/runs/{run_id}/traces/{trace}", "application/gzip"),
        (413,),
        ("bytes", "limit", "trace"),
    ),
    # suite files
    Case(
        "suite: a 10,000-case grid (100 batches x 100 lengths)", "suite", Job(spec=grid(100, 100)), (422,), ("cases",)
    ),
    Case(
        "suite: arrays nested 5,000 deep",
        "suite",
        Job(spec=suite(then=f"\nargs = {'[' * DEEP}{']' * DEEP}\n")),
        (422,),
        ("nested",),
    ),
    Case(
        "suite: inline tables nested 5,000 deep",
        "suite",
        Job(spec=suite(then="\nargs = " + "{a = " * DEEP + "}" * DEEP + "\n")),
        (422,),
        ("nested",),
    ),
    Case(
        "suite: a key dotted 20,000 deep",
        "suite",
        Job(spec=suite(then="\n" + ".".join(["k"] * 20_000) + " = 1\n")),
        (422,),
        ("nested",),
    ),
    Case(
        "suite: negative sequence length",
        "suite",
        Job(spec=suite("seq_q = 64", "seq_q = -64")),
        (422,),
        ("seq_q",),
    ),
    Case(
        "suite: NaN threshold",
        "suite",
        Job(spec=suite('name = "pipeline-small"', 'name = "pipeline-small"\nthresholds = { latency = nan }')),
        (422,),
        ("thresholds", "latency"),
    ),
    Case(
        "suite: infinite threshold",
        "suite",
        Job(spec=suite('name = "pipeline-small"', 'name = "pipeline-small"\nthresholds = { latency = inf }')),
        (422,),
        ("thresholds", "latency"),
    ),
    Case("suite: not UTF-8", "suite", Job(spec=text(b"\xff\xfe[suite]\n")), (422,), ("spec",)),
    Case("suite: missing", "suite", Job(spec=None), (422,), ("spec",)),
    Case(
        "suite: 2 MB file (limit 1 MiB)",
        "suite",
        Job(spec=suite(then="#" * (2 * 10**6) + "\n")),
        (413, 422),
        ("spec", "bytes", "suite"),
    ),
    # job fields
    Case("ancestors nested 5,000 deep", "fields", Job(fields={"ancestors": NESTED}), (422,), ("ancestors",)),
    Case(
        "ancestors: 51 commits (limit 50)",
        "fields",
        Job(fields={"ancestors": json.dumps([f"{i:040x}" for i in range(51)])}),
        (422,),
        ("ancestors",),
    ),
    Case("branch of 10,000 characters", "fields", Job(fields={"branch": "b" * 10_000}), (422,), ("branch",)),
    Case("commit with a NUL byte", "fields", Job(fields={"commit": "abc\x00def"}), (422,), ("commit",)),
    Case("testbed ../../etc", "fields", Job(fields={"testbed": "../../etc"}), (422,), ("testbed",)),
    Case("pull request number -5", "fields", Job(fields={"pr": "-5"}), (422,), ("pr",)),
    Case(
        "Idempotency-Key of 1,000 characters",
        "fields",
        Job(headers={"Idempotency-Key": "k" * 1000}),
        (422,),
        ("idempotency",),
    ),
    # result documents
    Case("upload: median NaN", "documents", _upload(with_literal(upload, MEDIAN, "NaN")), (422,), ("median",)),
    Case(
        "upload: median Infinity",
        "documents",
        _upload(with_literal(upload, MEDIAN, "Infinity")),
        (422,),
        ("median",),
    ),
    Case(
        "upload: kernel tflops 1e309",
        "documents",
        _upload(with_literal(upload, ("result", "cases", 1, "kernels", 0, "tflops"), "1e309")),
        (422,),
        ("tflops",),
    ),
    Case(
        "upload: params -Infinity",
        "documents",
        _upload(with_literal(upload, ("result", "cases", 0, "params", "scale"), "-Infinity")),
        (422,),
        ("params",),
    ),
    Case("upload: negative samples", "documents", _upload(changed(upload, negative_samples)), (422,), ("samples",)),
    Case("upload: params nested 300 deep", "documents", _upload(changed(upload, deep_params)), (422,), ("params",)),
    Case("upload: JSON nested 5,000 deep", "documents", _upload(text(NESTED)), (400, 422), NESTING),
    Case(
        "upload: result nested 5,000 deep",
        "documents",
        _upload(text('{"result": ' + NESTED + ', "branch": "main", "commit": "a1"}')),
        (400, 422),
        NESTING,
    ),
    Case("upload: no result", "documents", _upload(text('{"branch": "main", "commit": "a1"}')), (422,), ("result",)),
    Case(
        "upload: unknown schema version",
        "documents",
        _upload(changed(upload, unknown_schema)),
        (422,),
        ("schema",),
    ),
    Case(
        "upload: sent as text/plain",
        "documents",
        _upload(changed(upload), "text/plain"),
        (415, 422),
        ("body", "content-type", "json"),
    ),
    # traces
    Case(
        "trace name ../../etc/passwd",
        "traces",
        Call("PUT", "{base}/runs/{run_id}/traces/..%2F..%2Fetc%2Fpasswd", "submit", content=TRACE_GZ, headers=GZIP),
        (404, 422),
        ("trace", "name", "not found"),
    ),
    Case(
        "trace that is not gzip",
        "traces",
        Call("PUT", "{base}/runs/{run_id}/traces/{trace}", "submit", content=text(b"not gzip"), headers=GZIP),
        (422,),
        ("gzip", "trace"),
    ),
    # queries
    Case("query: NUL byte in branch", "queries", _runs("read", branch="a\x00b"), (422,), ("branch",)),
    Case("query: limit 100,000", "queries", _runs("read", limit="100000"), (422,), ("limit",)),
    Case("query: a cursor the API never gave", "queries", _runs("read", cursor="AAAA%%%"), (400, 422), ("cursor",)),
    Case(
        "query: trends since after until",
        "queries",
        Call(
            "GET",
            "{base}/trends",
            "read",
            params={"case": "x", "since": "2026-06-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        ),
        (422,),
        ("since", "until"),
    ),
    Case(
        "query: trends of an unknown metric",
        "queries",
        Call("GET", "{base}/trends", "read", params={"case": "x", "metric": "vibes"}),
        (422,),
        ("metric",),
    ),
    Case(
        "path: token id past INTEGER",
        "queries",
        Call("DELETE", "{base}/tokens/2147483648", "admin"),
        (422,),
        ("token_id",),
    ),
    # tokens
    Case("token: none", "tokens", _runs(None), (401,), ("authorization",)),
    Case("token: not one of ours", "tokens", _runs("foreign"), (401,), ("token",)),
    Case(
        "token: Basic scheme",
        "tokens",
        Call("GET", "{base}/runs", None, headers={"Authorization": "Basic dXNlcjpwYXNz"}),
        (401,),
        ("bearer", "authorization"),
    ),
    Case("token: 10,000 characters", "tokens", _runs("long"), (401,), ("token",)),
    Case("token: revoked", "tokens", _runs("revoked"), (401,), ("revoked", "token")),
    Case("token: expired", "tokens", _runs("expired"), (401,), ("expired",)),
    Case(
        "token: a new one of role root",
        "tokens",
        Call("POST", "{base}/tokens", "admin", json={"role": "root"}),
        (422,),
        ("role",),
    ),
    Case(
        "token: expires in -1d",
        "tokens",
        Call("POST", "{base}/tokens", "admin", json={"role": "read", "expires_in": "-1d"}),
        (422,),
        ("expires_in",),
    ),
    Case(
        "token: rotation grace 'forever'",
        "tokens",
        Call("POST", "{base}/tokens/{read_token_id}/rotate", "admin", json={"grace": "forever"}),
        (422,),
        ("grace",),
    ),
    # worker routes (a claimed job's token)
    Case(
        "worker result: median NaN",
        "worker",
        _worker_result(with_literal(worker_result, MEDIAN, "NaN")),
        (422,),
        ("median",),
    ),
    Case(
        "worker result: JSON nested 5,000 deep",
        "worker",
        _worker_result(text('{"attempt": 1, "result": ' + NESTED + "}")),
        (400, 422),
        NESTING,
    ),
    Case(
        "worker heartbeat: attempt -1",
        "worker",
        Call("POST", "/internal/jobs/{job_id}/heartbeat", "job", json={"attempt": -1}),
        (409, 422),
        ("attempt",),
    ),
    Case(
        "worker trace: name ../../x",
        "worker",
        Call("PUT", "/internal/jobs/{job_id}/traces/..%2F..%2Fx", "job", content=TRACE_GZ, headers=GZIP),
        (404, 409, 422),
        ("trace", "name", "not found"),
    ),
    # baselines
    Case(
        "baseline pin of a run id that is not one",
        "baselines",
        Call("POST", "{base}/baselines/pins", "admin", json={"run_id": "../../x"}),
        (404, 422),
        ("run",),
    ),
    Case(
        "baseline exclusion without a reason",
        "baselines",
        Call("POST", "{base}/baselines/exclusions", "admin", json={"run_id": "{run_id}"}),
        (422,),
        ("reason",),
    ),
)


def made_up_tokens() -> dict[str, str]:
    """The two tokens of ``TOKEN_NAMES`` that no one issued: one of ours in form, and one of 10,000 characters."""
    return {"foreign": "ap_" + secrets.token_urlsafe(32), "long": "ap_" + "x" * 10_000}


# --- the one function that reads the table ---------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The running server: its URL, the values of ``PATH_NAMES`` and the secrets of ``TOKEN_NAMES``."""

    url: str
    names: Mapping[str, str]
    tokens: Mapping[str, str]


def sender(request: Job | Call | Stream, target: Target) -> Callable[[], Answer]:
    """``request`` ready to send to ``target``: its body built now, sent (and answered) when called."""
    if isinstance(request, Stream):
        path = request.path.format_map(target.names)
        headers = {"Content-Type": request.content_type, "Authorization": f"Bearer {target.tokens['submit']}"}
        return partial(streamed, target.url, request.method, path, headers, request.total, chunked=request.chunked)
    options: dict[str, Any] = {}
    if isinstance(request, Job):
        files: dict[str, Any] = {}
        if request.spec is not None:
            spec = request.spec()
            files["spec"] = ("attnprof.toml", spec.encode() if isinstance(spec, str) else spec)
        if request.bundle is not None:
            files["bundle"] = ("src.tar.gz", request.bundle())
        options["data"] = {"testbed": PARKED, "branch": "main", "commit": "abc123", **request.fields}
        options["files"] = files
        request = Call("POST", "{base}/jobs", "submit", headers=request.headers)
    if request.content is not None:
        options["content"] = request.content()
    if request.json is not None:
        options["json"] = filled(request.json, target.names)
    if request.params is not None:
        options["params"] = dict(request.params)
    token = target.tokens[request.token] if request.token else None
    headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **request.headers}
    return partial(_send, target.url, headers, request.method, request.path.format_map(target.names), options)


def _send(url: str, headers: dict[str, str], method: str, path: str, options: dict[str, Any]) -> Answer:
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        r = http.request(method, path, **options)
    return {"status": r.status_code, "ctype": r.headers.get("content-type", ""), "body": r.text[:20_000]}
