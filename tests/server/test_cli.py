"""The CLI verbs as subprocesses against a real ``attnprof serve`` on a free port and a real Postgres database."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.pgtest import create_database, drop_database
from tests.server import documents as docs
from tests.server.stack import REDIS_URL

ATTNPROF = [str(Path(sys.executable).parent / "attnprof")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ATTNPROF, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    name, url = create_database()
    env = {**os.environ, "ATTNPROF_DATABASE_URL": url, "ATTNPROF_BROKER_URL": REDIS_URL}
    tmp = tmp_path_factory.mktemp("cli")
    port = _free_port()
    proc = None
    try:
        up = _run(env, "db", "upgrade")
        assert up.returncode == 0, up.stderr
        proc = subprocess.Popen(
            [*ATTNPROF, "serve", "--port", str(port)],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise AssertionError("attnprof serve did not come up")
        yield env, base, tmp
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        drop_database(name)


def test_admin_and_upload(server) -> None:
    env, base, tmp = server
    made = _run(env, "admin", "create-project", "cliproj", "--json")
    assert made.returncode == 0, made.stderr
    admin = json.loads(made.stdout)
    assert admin["project"]["name"] == "cliproj" and admin["token"].startswith("ap_")
    sub = json.loads(_run(env, "admin", "create-token", "cliproj", "--role", "submit", "--json").stdout)
    assert sub["role"] == "submit"
    assert _run(env, "admin", "create-token", "cliproj", "--role", "boss").returncode == 2
    assert _run(env, "admin", "create-project", "cliproj").returncode == 2
    wk = json.loads(_run(env, "admin", "create-worker-token", "--testbed", "h200-a", "--json").stdout)
    assert wk["testbed"] == "h200-a"
    who = httpx.get(f"{base}/api/v1/token", headers={"Authorization": f"Bearer {wk['token']}"}).json()
    assert who == {"role": "worker", "project": None, "testbed": "h200-a"}

    first, slow = tmp / "first.json", tmp / "slow.json"
    first.write_text(json.dumps(docs.h200()))
    slow.write_text(json.dumps(docs.h200(slower=1.15)))
    cenv = {**env, "ATTNPROF_SERVER": base, "ATTNPROF_TOKEN": sub["token"]}
    ok = _run(cenv, "upload", str(first), "--branch", "main", "--commit", "a1", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"] == "pass"
    bad = _run(cenv, "upload", str(slow), "--branch", "pr", "--commit", "b1", "--base-commit", "a1", "--pr", "3")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "verdict: fail" in bad.stdout
    # each failing finding with its change and both values in their units, never a raw float
    assert re.search(r"\n  fail \S+ \w+ \+\d+\.\d% \([\d.,]+ [\w/]+ -> [\d.,]+ [\w/]+\): ", bad.stdout), bad.stdout
    assert not re.search(r"\d\.\d{5,}", bad.stdout)
    missing = _run(cenv, "upload", str(tmp / "nope.json"), "--branch", "main", "--commit", "x")
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    refused = _run({**cenv, "ATTNPROF_TOKEN": "ap_wrong"}, "upload", str(first), "--branch", "m", "--commit", "x")
    assert refused.returncode == 2 and "401" in refused.stderr


def _from(address: str, base: str, path: str, token: str, **headers: str) -> httpx.Response:
    """A request to the real server whose connection comes from ``address`` (127.0.0.1 or 127.0.0.2: both loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=base, transport=transport, timeout=10) as client:
        return client.get(path, headers={"Authorization": f"Bearer {token}", **headers})


def _json(env: dict[str, str], *args: str) -> dict:
    done = _run(env, "admin", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_expiry_rotation_and_the_audit_log_from_the_command_line(server) -> None:
    env, base, _ = server
    _json(env, "create-project", "audited")
    made = _json(env, "create-token", "audited", "--role", "submit", "--name", "ci", "--expires-in", "90d")
    assert made["role"] == "submit" and made["expires_at"] and made["token"].startswith("ap_")
    for args, says in (
        (("create-token", "audited", "--role", "read", "--expires-in", "-5d"), "--expires-in: '-5d' is negative"),
        (("create-token", "audited", "--role", "read", "--expires-in=ninety"), "--expires-in: 'ninety' is not"),
        (("create-worker-token", "--testbed", "tb-cli", "--expires-in", "0d"), "--expires-in: '0d' is no time"),
        (("rotate-token", str(made["token_id"]), "--grace", "-1h"), "--grace: '-1h' is negative"),
        (("rotate-token", "999999"), "no token 999999"),
        (("audit",), "name a PROJECT or a --testbed"),
        (("audit", "nope"), "no project 'nope'"),
        (("audit", "audited", "--cursor", "nope"), "cursor: not a cursor this API returned"),
    ):
        refused = _run(env, "admin", *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert says in refused.stderr, refused.stderr
        if any(a.startswith(("--expires-in", "--grace")) for a in args):  # the allowed form is named
            assert "a whole number and a unit, s, m, h, d or w" in refused.stderr, refused.stderr
    # nothing was made or changed by those
    assert [t["id"] for t in _json(env, "list-tokens", "audited")["tokens"]] == [made["token_id"] - 1, made["token_id"]]
    assert _run(env, "admin", "list-tokens", "--testbed", "tb-cli").returncode == 2  # no such testbed yet

    # one token from two addresses; a forwarded address from a proxy nobody trusts is not taken
    path = "/api/v1/projects/audited/runs"
    assert _from("127.0.0.1", base, path, made["token"], **{"X-Forwarded-For": "198.51.100.7"}).status_code == 200
    assert _from("127.0.0.1", base, path, made["token"]).status_code == 200
    assert _from("127.0.0.2", base, path, made["token"]).status_code == 200

    rotated = _json(env, "rotate-token", str(made["token_id"]), "--grace", "1h")
    assert rotated["replaced"]["id"] == made["token_id"] and rotated["replaced"]["revoked_at"]
    assert (rotated["role"], rotated["name"]) == ("submit", "ci") and rotated["expires_at"]
    assert _from("127.0.0.1", base, path, made["token"]).status_code == 200  # its grace period
    assert _from("127.0.0.1", base, path, rotated["token"]).status_code == 200
    again = _run(env, "admin", "rotate-token", str(made["token_id"]))
    assert again.returncode == 2 and "was rotated already" in again.stderr
    assert _json(env, "revoke-token", str(made["token_id"]))["revoked_at"]
    gone = _from("127.0.0.1", base, path, made["token"])
    assert gone.status_code == 401 and gone.json()["detail"] == "unknown or revoked token"

    events = _json(env, "audit", "audited")["events"]
    assert [e["id"] for e in events] == sorted((e["id"] for e in events), reverse=True)
    old = [(e["kind"], e["address"]) for e in reversed(events) if e["token_id"] == made["token_id"]]
    assert old == [
        ("token.created", None),
        ("token.new_address", "127.0.0.1"),
        ("token.new_address", "127.0.0.2"),
        ("token.rotated", None),
        ("token.new_address", "127.0.0.1"),  # back on the first address, in its grace period
        ("token.revoked", None),
    ]
    by_cli = [e["detail"] for e in events if e["kind"] in ("token.created", "token.rotated", "token.revoked")]
    assert by_cli and all("by the command line" in d for d in by_cli)
    paged = _json(env, "audit", "audited", "--limit", "2")
    assert [e["id"] for e in paged["events"]] == [e["id"] for e in events[:2]] and paged["next"]
    rest = _json(env, "audit", "audited", "--limit", "1000", "--cursor", paged["next"])
    assert [e["id"] for e in rest["events"]] == [e["id"] for e in events[2:]] and rest["next"] is None
    text = _run(env, "admin", "audit", "audited")
    assert text.returncode == 0 and "token.new_address" in text.stdout and "127.0.0.2" in text.stdout

    # a worker token rotates from the command line only, at once without --grace
    wk = _json(env, "create-worker-token", "--testbed", "tb-cli", "--expires-in", "7d")
    assert _from("127.0.0.2", base, "/api/v1/token", wk["token"]).json()["testbed"] == "tb-cli"
    new = _json(env, "rotate-token", str(wk["token_id"]))
    assert _from("127.0.0.2", base, "/api/v1/token", wk["token"]).status_code == 401
    assert _from("127.0.0.2", base, "/api/v1/token", new["token"]).json() == {
        "role": "worker",
        "project": None,
        "testbed": "tb-cli",
    }
    listed = _json(env, "list-tokens", "--testbed", "tb-cli")["tokens"]
    assert [(t["id"], t["revoked_at"] is not None) for t in listed] == [
        (wk["token_id"], True),
        (new["token_id"], False),
    ]
    worker_events = [
        (e["kind"], e["token_id"], e["testbed"]) for e in _json(env, "audit", "--testbed", "tb-cli")["events"]
    ]
    assert worker_events == [
        ("token.new_address", new["token_id"], "tb-cli"),
        ("token.created", new["token_id"], "tb-cli"),
        ("token.rotated", wk["token_id"], "tb-cli"),
        ("token.new_address", wk["token_id"], "tb-cli"),
        ("token.created", wk["token_id"], "tb-cli"),
    ]
    shown = _run(env, "admin", "rotate-token", str(new["token_id"]), "--grace", "30m")
    assert shown.returncode == 0 and "(shown once): ap_" in shown.stdout and "works until" in shown.stdout


def test_an_uploads_findings_print_durations_past_10_ms_in_ms() -> None:
    from attnprof.client.cli import _finding_change
    from attnprof.contract.public_api import ComparisonFinding

    def finding(**fields: object) -> ComparisonFinding:
        return ComparisonFinding.model_validate(
            {"case": "c", "metric": "latency", "status": "regressed", "verdict": "fail", **fields}
        )

    slower = finding(change=0.0662, unit="us", baseline=10412.0, candidate=11101.3)
    assert _finding_change(slower) == " +6.6% (10.4 ms -> 11.1 ms)"
    assert _finding_change(finding(change=-0.003, unit="GB/s", baseline=3350.0, candidate=3340.0)) == (
        " -0.3% (3,350 GB/s -> 3,340 GB/s)"
    )
    assert _finding_change(finding(change=None, unit="us")) == ""
