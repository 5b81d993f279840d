"""The hand-made hostile inputs, each with the refusal it must get."""

from __future__ import annotations

import gzip
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.reliability.common import PARKED
from bench.reliability.payloads import DEEP, MIB, gzip_bomb, many_members, streamed, tar_members
from bench.reliability.stack import Stack
from bench.reliability.suites import small_suite


@dataclass
class BadInput:
    name: str
    group: str
    send: Callable[[], dict[str, Any]]
    statuses: tuple[int, ...]
    words: tuple[str, ...]  # one of these (case-insensitive) must be in the error's detail: the field it names


def _answer(r: httpx.Response) -> dict[str, Any]:
    return {"status": r.status_code, "ctype": r.headers.get("content-type", ""), "body": r.text[:20_000]}


def _with_literal(body: dict[str, Any], place: tuple[str | int, ...], literal: str) -> str:
    """``body`` as JSON text with ``literal`` (NaN, Infinity, 1e309: not JSON, but what Python's json reads) at
    ``place``."""
    node: Any = body
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = "__literal__"
    return json.dumps(body).replace('"__literal__"', literal)


def _special_tokens(stack: Stack) -> dict[str, str]:
    """A revoked token and an expired one of project ``a``, made by the service's own code."""
    from datetime import timedelta

    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import repository as projects

    engine = make_engine(stack.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.get_by_name(session, stack.tenants["a"].name)
            assert project is not None
            revoked, revoked_secret = auth.create_project_token(session, project_id=project.id, role="read")
            expiring = auth.create_project_token(
                session, project_id=project.id, role="read", expires_in=timedelta(seconds=1)
            )[1]
            session.flush()
            auth.revoke(session, project_id=project.id, token_id=revoked.id)
            session.commit()
    finally:
        engine.dispose()
    time.sleep(1.2)
    return {"revoked": revoked_secret, "expired": expiring}


def catalogue(stack: Stack, run_id: str, trace_name: str, job: tuple[str, str]) -> list[BadInput]:
    """The hostile inputs, each with the refusal it must get."""
    from tests.server import documents as docs

    a = stack.tenants["a"]
    base = f"/api/v1/projects/{a.name}"
    spec = small_suite(0.1)
    special = _special_tokens(stack)
    job_id, job_token = job

    def client(token: str | None = None, headers: dict[str, str] | None = None) -> httpx.Client:
        h = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=stack.url, headers={**h, **(headers or {})}, timeout=60)

    def post_job(
        *,
        spec_text: str | bytes | None = spec,
        bundle: bytes | None = None,
        headers: dict[str, str] | None = None,
        **fields: str,
    ) -> Callable[[], dict[str, Any]]:
        def send() -> dict[str, Any]:
            files: dict[str, Any] = {}
            if spec_text is not None:
                files["spec"] = ("attnprof.toml", spec_text.encode() if isinstance(spec_text, str) else spec_text)
            if bundle is not None:
                files["bundle"] = ("src.tar.gz", bundle)
            data = {"testbed": PARKED, "branch": "main", "commit": "abc123", **fields}
            with client(a.tokens["submit"], headers) as http:
                return _answer(http.post(f"{base}/jobs", data=data, files=files))

        return send

    def post_json(path: str, text: str, token: str, ctype: str = "application/json") -> Callable[[], dict[str, Any]]:
        def send() -> dict[str, Any]:
            with client(token, {"Content-Type": ctype}) as http:
                return _answer(http.post(path, content=text))

        return send

    def request(method: str, path: str, token: str | None, **kw: Any) -> Callable[[], dict[str, Any]]:
        def send() -> dict[str, Any]:
            with client(token, kw.pop("headers", None)) as http:
                return _answer(http.request(method, path, **kw))

        return send

    def upload_with(place: tuple[str | int, ...], literal: str) -> Callable[[], dict[str, Any]]:
        return post_json(
            f"{base}/results", _with_literal(docs.upload_body(docs.h200()), place, literal), a.tokens["submit"]
        )

    def upload_doc(change: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
        body = docs.upload_body(docs.h200())
        change(body)
        return post_json(f"{base}/results", json.dumps(body), a.tokens["submit"])

    def deep_params(body: dict[str, Any]) -> None:
        deep: Any = 1
        for _ in range(300):
            deep = [deep]
        body["result"]["cases"][0]["params"]["deep"] = deep

    def negative_samples(body: dict[str, Any]) -> None:
        lat = body["result"]["cases"][0]["latency_us"]
        lat["samples"] = [-abs(v) for v in lat["samples"]]

    def grid(n_batch: int, n_seq: int) -> str:
        return spec.replace(
            "batch = 1\nq_heads = 2\nseq_q = 64",
            f"batch = {list(range(1, n_batch + 1))}\nq_heads = 2\nseq_q = {list(range(16, 16 + n_seq))}",
            1,
        )

    submit_tok = a.tokens["submit"]
    json_ct = {"Content-Type": "application/json", "Authorization": f"Bearer {submit_tok}"}
    multipart_ct = {"Content-Type": "multipart/form-data; boundary=x0x0x0", "Authorization": f"Bearer {submit_tok}"}
    trace_ct = {"Content-Type": "application/gzip", "Authorization": f"Bearer {submit_tok}"}
    gz = gzip.compress(b'{"traceEvents": []}')
    items = [
        # bundles
        BadInput(
            "bundle: path traversal (../evil.py)",
            "bundle",
            post_job(bundle=tar_members(("../evil.py", "file", b"x"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: absolute path (/etc/cron.d/evil)",
            "bundle",
            post_job(bundle=tar_members(("/etc/cron.d/evil", "file", b"x"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: symbolic link to /etc/shadow",
            "bundle",
            post_job(bundle=tar_members(("pkg/s", "symlink", "/etc/shadow"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: hard link to /etc/passwd",
            "bundle",
            post_job(bundle=tar_members(("pkg/h", "hardlink", "/etc/passwd"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: character device (/dev/null's numbers)",
            "bundle",
            post_job(bundle=tar_members(("pkg/null", "chardev", None))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: FIFO", "bundle", post_job(bundle=tar_members(("pkg/fifo", "fifo", None))), (422,), ("bundle",)
        ),
        BadInput(
            "bundle: the same member twice",
            "bundle",
            post_job(bundle=tar_members(("pkg/m.py", "file", b"1"), ("pkg/m.py", "file", b"2"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: the same member spelt two ways (./pkg//m.py)",
            "bundle",
            post_job(bundle=tar_members(("pkg/m.py", "file", b"1"), ("./pkg//m.py", "file", b"2"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: a file, then a member under it",
            "bundle",
            post_job(bundle=tar_members(("pkg", "file", b"1"), ("pkg/m.py", "file", b"2"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: a directory, then a file of its name",
            "bundle",
            post_job(bundle=tar_members(("pkg", "dir", None), ("pkg", "file", b"1"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: gzip bomb (600 MiB of zeros in ~0.6 MB)",
            "bundle",
            post_job(bundle=gzip_bomb(600 * MIB)),
            (413,),
            ("bundle",),
        ),
        BadInput("bundle: 10,001 members", "bundle", post_job(bundle=many_members(10_001)), (422,), ("bundle",)),
        BadInput("bundle: not gzip", "bundle", post_job(bundle=secrets.token_bytes(4096)), (422,), ("bundle",)),
        BadInput("bundle: empty archive", "bundle", post_job(bundle=tar_members()), (422,), ("bundle",)),
        BadInput(
            "bundle: 60 MB (limit 50 MiB)",
            "bundle",
            post_job(bundle=secrets.token_bytes(60 * 10**6)),
            (413,),
            ("bundle", "bytes"),
        ),
        # bodies
        BadInput(
            "200 MB multipart body, Content-Length declared",
            "body",
            lambda: streamed(stack.url, "POST", f"{base}/jobs", multipart_ct, 200 * 10**6, chunked=False),
            (413,),
            ("bytes", "limit", "body"),
        ),
        BadInput(
            "200 MB JSON upload, Content-Length declared",
            "body",
            lambda: streamed(stack.url, "POST", f"{base}/results", json_ct, 200 * 10**6, chunked=False),
            (413,),
            ("bytes", "limit", "body"),
        ),
        BadInput(
            "200 MB JSON upload, chunked (no length)",
            "body",
            lambda: streamed(stack.url, "POST", f"{base}/results", json_ct, 200 * 10**6, chunked=True),
            (413,),
            ("bytes", "limit", "body"),
        ),
        BadInput(
            "200 MB trace upload (limit 64 MiB)",
            "body",
            lambda: streamed(
                stack.url, "PUT", f"{base}/runs/{run_id}/traces/{trace_name}", trace_ct, 200 * 10**6, chunked=False
            ),
            (413,),
            ("bytes", "limit", "trace"),
        ),
        # suite files
        BadInput(
            "suite: a 10,000-case grid (100 batches x 100 lengths)",
            "suite",
            post_job(spec_text=grid(100, 100)),
            (422,),
            ("cases",),
        ),
        BadInput(
            "suite: arrays nested 5,000 deep",
            "suite",
            post_job(spec_text=spec + f"\nargs = {'[' * DEEP}{']' * DEEP}\n"),
            (422,),
            ("nested",),
        ),
        BadInput(
            "suite: inline tables nested 5,000 deep",
            "suite",
            post_job(spec_text=spec + "\nargs = " + "{a = " * DEEP + "}" * DEEP + "\n"),
            (422,),
            ("nested",),
        ),
        BadInput(
            "suite: a key dotted 20,000 deep",
            "suite",
            post_job(spec_text=spec + "\n" + ".".join(["k"] * 20_000) + " = 1\n"),
            (422,),
            ("nested",),
        ),
        BadInput(
            "suite: negative sequence length",
            "suite",
            post_job(spec_text=spec.replace("seq_q = 64", "seq_q = -64", 1)),
            (422,),
            ("seq_q",),
        ),
        BadInput(
            "suite: NaN threshold",
            "suite",
            post_job(
                spec_text=spec.replace(
                    'name = "pipeline-small"', 'name = "pipeline-small"\nthresholds = { latency = nan }', 1
                )
            ),
            (422,),
            ("thresholds", "latency"),
        ),
        BadInput(
            "suite: infinite threshold",
            "suite",
            post_job(
                spec_text=spec.replace(
                    'name = "pipeline-small"', 'name = "pipeline-small"\nthresholds = { latency = inf }', 1
                )
            ),
            (422,),
            ("thresholds", "latency"),
        ),
        BadInput("suite: not UTF-8", "suite", post_job(spec_text=b"\xff\xfe[suite]\n"), (422,), ("spec",)),
        BadInput("suite: missing", "suite", post_job(spec_text=None), (422,), ("spec",)),
        BadInput(
            "suite: 2 MB file (limit 1 MiB)",
            "suite",
            post_job(spec_text=spec + "#" * (2 * 10**6) + "\n"),
            (413, 422),
            ("spec", "bytes", "suite"),
        ),
        # job fields
        BadInput(
            "ancestors nested 5,000 deep", "fields", post_job(ancestors="[" * DEEP + "]" * DEEP), (422,), ("ancestors",)
        ),
        BadInput(
            "ancestors: 51 commits (limit 50)",
            "fields",
            post_job(ancestors=json.dumps([f"{i:040x}" for i in range(51)])),
            (422,),
            ("ancestors",),
        ),
        BadInput("branch of 10,000 characters", "fields", post_job(branch="b" * 10_000), (422,), ("branch",)),
        BadInput("commit with a NUL byte", "fields", post_job(commit="abc\x00def"), (422,), ("commit",)),
        BadInput("testbed ../../etc", "fields", post_job(testbed="../../etc"), (422,), ("testbed",)),
        BadInput("pull request number -5", "fields", post_job(pr="-5"), (422,), ("pr",)),
        BadInput(
            "Idempotency-Key of 1,000 characters",
            "fields",
            post_job(headers={"Idempotency-Key": "k" * 1000}),
            (422,),
            ("idempotency",),
        ),
        # result documents
        BadInput(
            "upload: median NaN",
            "documents",
            upload_with(("result", "cases", 0, "latency_us", "median"), "NaN"),
            (422,),
            ("median",),
        ),
        BadInput(
            "upload: median Infinity",
            "documents",
            upload_with(("result", "cases", 0, "latency_us", "median"), "Infinity"),
            (422,),
            ("median",),
        ),
        BadInput(
            "upload: kernel tflops 1e309",
            "documents",
            upload_with(("result", "cases", 1, "kernels", 0, "tflops"), "1e309"),
            (422,),
            ("tflops",),
        ),
        BadInput(
            "upload: params -Infinity",
            "documents",
            upload_with(("result", "cases", 0, "params", "scale"), "-Infinity"),
            (422,),
            ("params",),
        ),
        BadInput("upload: negative samples", "documents", upload_doc(negative_samples), (422,), ("samples",)),
        BadInput("upload: params nested 300 deep", "documents", upload_doc(deep_params), (422,), ("params",)),
        BadInput(
            "upload: JSON nested 5,000 deep",
            "documents",
            post_json(f"{base}/results", "[" * DEEP + "]" * DEEP, submit_tok),
            (400, 422),
            ("nest", "deep", "depth"),
        ),
        BadInput(
            "upload: result nested 5,000 deep",
            "documents",
            post_json(
                f"{base}/results",
                '{"result": ' + "[" * DEEP + "]" * DEEP + ', "branch": "main", "commit": "a1"}',
                submit_tok,
            ),
            (400, 422),
            ("nest", "deep", "depth"),
        ),
        BadInput(
            "upload: no result",
            "documents",
            post_json(f"{base}/results", '{"branch": "main", "commit": "a1"}', submit_tok),
            (422,),
            ("result",),
        ),
        BadInput(
            "upload: unknown schema version",
            "documents",
            upload_doc(lambda b: b["result"].update(schema="attnprof.result/v999")),
            (422,),
            ("schema",),
        ),
        BadInput(
            "upload: sent as text/plain",
            "documents",
            post_json(f"{base}/results", json.dumps(docs.upload_body(docs.h200())), submit_tok, "text/plain"),
            (415, 422),
            ("body", "content-type", "json"),
        ),
        # traces
        BadInput(
            "trace name ../../etc/passwd",
            "traces",
            request(
                "PUT",
                f"{base}/runs/{run_id}/traces/..%2F..%2Fetc%2Fpasswd",
                submit_tok,
                content=gz,
                headers={"Content-Type": "application/gzip"},
            ),
            (404, 422),
            ("trace", "name", "not found"),
        ),
        BadInput(
            "trace that is not gzip",
            "traces",
            request(
                "PUT",
                f"{base}/runs/{run_id}/traces/{trace_name}",
                submit_tok,
                content=b"not gzip",
                headers={"Content-Type": "application/gzip"},
            ),
            (422,),
            ("gzip", "trace"),
        ),
        # queries
        BadInput(
            "query: NUL byte in branch",
            "queries",
            request("GET", f"{base}/runs", a.tokens["read"], params={"branch": "a\x00b"}),
            (422,),
            ("branch",),
        ),
        BadInput(
            "query: limit 100,000",
            "queries",
            request("GET", f"{base}/runs", a.tokens["read"], params={"limit": "100000"}),
            (422,),
            ("limit",),
        ),
        BadInput(
            "query: a cursor the API never gave",
            "queries",
            request("GET", f"{base}/runs", a.tokens["read"], params={"cursor": "AAAA%%%"}),
            (400, 422),
            ("cursor",),
        ),
        BadInput(
            "query: trends since after until",
            "queries",
            request(
                "GET",
                f"{base}/trends",
                a.tokens["read"],
                params={"case": "x", "since": "2026-06-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
            ),
            (422,),
            ("since", "until"),
        ),
        BadInput(
            "query: trends of an unknown metric",
            "queries",
            request("GET", f"{base}/trends", a.tokens["read"], params={"case": "x", "metric": "vibes"}),
            (422,),
            ("metric",),
        ),
        BadInput(
            "path: token id past INTEGER",
            "queries",
            request("DELETE", f"{base}/tokens/2147483648", a.tokens["admin"]),
            (422,),
            ("token_id",),
        ),
        # tokens
        BadInput("token: none", "tokens", request("GET", f"{base}/runs", None), (401,), ("authorization",)),
        BadInput(
            "token: not one of ours",
            "tokens",
            request("GET", f"{base}/runs", "ap_" + secrets.token_urlsafe(32)),
            (401,),
            ("token",),
        ),
        BadInput(
            "token: Basic scheme",
            "tokens",
            request("GET", f"{base}/runs", None, headers={"Authorization": "Basic dXNlcjpwYXNz"}),
            (401,),
            ("bearer", "authorization"),
        ),
        BadInput(
            "token: 10,000 characters",
            "tokens",
            request("GET", f"{base}/runs", "ap_" + "x" * 10_000),
            (401,),
            ("token",),
        ),
        BadInput(
            "token: revoked", "tokens", request("GET", f"{base}/runs", special["revoked"]), (401,), ("revoked", "token")
        ),
        BadInput("token: expired", "tokens", request("GET", f"{base}/runs", special["expired"]), (401,), ("expired",)),
        BadInput(
            "token: a new one of role root",
            "tokens",
            request("POST", f"{base}/tokens", a.tokens["admin"], json={"role": "root"}),
            (422,),
            ("role",),
        ),
        BadInput(
            "token: expires in -1d",
            "tokens",
            request("POST", f"{base}/tokens", a.tokens["admin"], json={"role": "read", "expires_in": "-1d"}),
            (422,),
            ("expires_in",),
        ),
        BadInput(
            "token: rotation grace 'forever'",
            "tokens",
            request(
                "POST", f"{base}/tokens/{a.token_ids['read']}/rotate", a.tokens["admin"], json={"grace": "forever"}
            ),
            (422,),
            ("grace",),
        ),
        # worker routes (a claimed job's token)
        BadInput(
            "worker result: median NaN",
            "worker",
            post_json(
                f"/internal/jobs/{job_id}/result",
                _with_literal(
                    {"attempt": 1, "result": docs.h200()}, ("result", "cases", 0, "latency_us", "median"), "NaN"
                ),
                job_token,
            ),
            (422,),
            ("median",),
        ),
        BadInput(
            "worker result: JSON nested 5,000 deep",
            "worker",
            post_json(
                f"/internal/jobs/{job_id}/result",
                '{"attempt": 1, "result": ' + "[" * DEEP + "]" * DEEP + "}",
                job_token,
            ),
            (400, 422),
            ("nest", "deep", "depth"),
        ),
        BadInput(
            "worker heartbeat: attempt -1",
            "worker",
            request("POST", f"/internal/jobs/{job_id}/heartbeat", job_token, json={"attempt": -1}),
            (409, 422),
            ("attempt",),
        ),
        BadInput(
            "worker trace: name ../../x",
            "worker",
            request(
                "PUT",
                f"/internal/jobs/{job_id}/traces/..%2F..%2Fx",
                job_token,
                content=gz,
                headers={"Content-Type": "application/gzip"},
            ),
            (404, 409, 422),
            ("trace", "name", "not found"),
        ),
        # baselines
        BadInput(
            "baseline pin of a run id that is not one",
            "baselines",
            request("POST", f"{base}/baselines/pins", a.tokens["admin"], json={"run_id": "../../x"}),
            (404, 422),
            ("run",),
        ),
        BadInput(
            "baseline exclusion without a reason",
            "baselines",
            request("POST", f"{base}/baselines/exclusions", a.tokens["admin"], json={"run_id": run_id}),
            (422,),
            ("reason",),
        ),
    ]
    return items
