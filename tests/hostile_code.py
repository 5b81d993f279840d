"""The code of a hostile job and of an honest one, as bundles (``{path: bytes}``), for the hostile-job test
(tests/worker/test_hostile_jobs.py) and its run on a GPU host in the embedded mode (bench/hostile_embedded.py).

The hostile factory attacks from inside the profiler, leaves a daemon that tries to plant code in every job folder
it can find, then raises with what it found: its findings come back as the job's failure reason (the only channel
out of the jail besides the result document).
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

MARKER = "attnprof-hostile-" + secrets.token_hex(4)

HOSTILE = {
    "evil/__init__.py": b"",
    "evil/targets.py": f'''import glob, json, os, socket, sys, time

MARKER = "{MARKER}"


def _try(found, what, fn):
    try:
        got = fn()
        found[what] = "LEAKED: " + str(got)[:200]
    except Exception as e:
        found[what] = "refused: " + type(e).__name__


def _connect(port):
    socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
    return "connected"


def _daemon(scratch_root):
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    sys.argv[0] = MARKER
    for _ in range(60):  # a minute of trying to plant code in every job folder it can find
        for folder in glob.glob(scratch_root + "/*/src") + glob.glob("/job/../*/src"):
            try:
                with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
                    f.write("raise SystemExit('planted')")
            except OSError:
                pass
        time.sleep(1)
    os._exit(0)


def attack(params, device):
    a = params["args"]
    found = {{}}
    def environ():
        leaked = []
        for path in glob.glob("/proc/*/environ"):
            try:
                text = open(path, "rb").read()
            except OSError:
                continue
            if b"ATTNPROF_" in text:
                leaked.append(path)
        if leaked:
            return leaked
        raise PermissionError("no ATTNPROF_ variable in any readable environ")
    _try(found, "environ", environ)
    _try(found, "worker home", lambda: open(a["canary"]).read())
    _try(found, "scratch root", lambda: os.listdir(a["scratch_root"]))
    _try(found, "shadow", lambda: open("/etc/shadow").read())
    _try(found, "redis", lambda: _connect(a["redis_port"]))
    _try(found, "postgres", lambda: _connect(5432))
    _try(found, "service", lambda: _connect(a["service_port"]))
    _try(found, "write usr", lambda: open("/usr/" + MARKER, "w").write("x"))
    _try(found, "write scratch root", lambda: open(a["scratch_root"] + "/" + MARKER, "w").write("x"))
    _daemon(a["scratch_root"])
    raise RuntimeError("REPORT " + json.dumps(found))
'''.encode(),
}

VICTIM = {
    "honest/__init__.py": b"",
    "honest/kern.py": b"""import sys
import torch
import torch.nn.functional as F


def make_case(params, device):
    planted = sys.modules.get("sitecustomize")
    if planted is not None and "planted" in open(planted.__file__).read():
        raise RuntimeError("foreign code ran in this job")
    q = torch.randn(1, params["q_heads"], params["seq_q"], params["head_dim"], device=device)
    return F.scaled_dot_product_attention, (q, q.clone(), q.clone())
""",
}


ATTACKS = (
    "environ", "worker home", "scratch root", "shadow", "redis", "postgres", "service", "write usr",
    "write scratch root",
)  # fmt: skip


def attack_args(*, canary: Path, scratch_root: Path, service_port: int | str, redis_port: int | str) -> dict[str, str]:
    return {
        "canary": str(canary),
        "scratch_root": str(scratch_root),
        "service_port": str(service_port),
        "redis_port": str(redis_port),
    }


def findings(reason: str | None) -> dict[str, str] | None:
    """What the hostile job reported (attack: outcome), from its failure reason; None if it reported nothing."""
    match = re.search(r"REPORT (\{.*?\})", reason or "")
    return json.loads(match.group(1)) if match else None


def leaked(found: dict[str, Any]) -> dict[str, Any]:
    """The attacks that were not refused."""
    return {k: v for k, v in found.items() if not str(v).startswith("refused")}


def daemons_alive() -> list[str]:
    """Host pids of processes whose command line carries the hostile job's marker (its daemon, if it survived)."""
    alive = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if MARKER.encode() in cmdline.read_bytes():
                alive.append(cmdline.parent.name)
        except OSError:
            continue
    return alive
