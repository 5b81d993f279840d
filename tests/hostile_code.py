"""The code of hostile jobs and of an honest one, as bundles (``{path: bytes}``), for the hostile-job tests
(tests/worker/test_hostile_jobs.py, tests/worker/test_hostile_handback.py) and their run on a GPU host in the
embedded mode (bench/hostile_embedded.py).

Two kinds of attack:

- from inside (``HOSTILE``): the factory attacks from inside the profiler, leaves a daemon that tries to plant code
  in every job folder it can find, then raises with what it found: its findings come back as the job's failure
  reason (the only channel out of the jail besides the result document);
- from outside (``PLANTED``, ``attacks``): the factory leaves things in the job's folder for the root worker to read
  after the job (links to the host's files, a FIFO, a hard link, a gzip bomb), or passes one of the job's
  limits (memory in a memfd or /dev/shm, output, disk, processes). ``judge`` says what of the worker's answer did not
  hold.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import secrets
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
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


# --- what a job leaves behind, and its limits ----------------------------------------------------------------------

PLANTED = {
    "planted/__init__.py": b"",
    "planted/targets.py": rb'''"""Factories that leave things in the job's folder for the worker to read once the
job ended, or pass one of the job's limits. Each runs inside the profiler, in the jail, as the job's code does."""
import json, os, struct, sys, threading, time, zlib

OUT = "/job/out"


def _leave():
    # The profiler ends here, before it writes a document of its own: the worker reads what was planted.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def links(params, device):
    """Every name the worker reads, or once read, made a link: to a root-only file of the host, and to the environment
    of whoever opens it (the worker, were it followed)."""
    os.symlink("/proc/self/environ", "/job/output.log")
    for name in ("result.json", "base.json", "paired.json"):
        os.symlink(params["args"]["canary"], os.path.join(OUT, name))
    _leave()


def out_link(params, device):
    """The output folder itself a link to a host folder that holds a result document and traces."""
    os.rename(OUT, "/job/out.real")
    os.symlink(params["args"]["host_out"], OUT)
    os.symlink(params["args"]["canary"], "/job/output.log")
    _leave()


def traces_link(params, device):
    """Runs after the suite's first case traced: the traces folder becomes a link to a host folder holding a file of
    that trace's name; the profiler then writes its real document, which names it."""
    traces = os.path.join(OUT, "traces")
    if not os.path.islink(traces):
        os.rename(traces, traces + ".real")
        os.symlink(params["args"]["host_traces"], traces)
    raise RuntimeError("the traces folder is a link now")


def _bomb(mib):
    """A gzip file of about a KiB per MiB it inflates to (zeros: after the first, each MiB deflates to the same
    bytes), with its true CRC and size."""
    zeros = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return head + first + again * (mib - 1) + b"\x03\x00" + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)


def special(params, device):
    """out/result.json as something other than a plain file of the job's."""
    a = params["args"]
    path = os.path.join(OUT, "result.json")
    if a["kind"] == "fifo":  # whoever opens it to read waits for a writer for ever
        os.mkfifo(path)
    elif a["kind"] == "device":  # reads for ever
        os.symlink("/dev/zero", path)
        os.symlink("/dev/zero", "/job/output.log")
    elif a["kind"] == "hard_link":  # a second name for a file: on a host's disk, it could be the host's
        os.link(a["document"], path)
    elif a["kind"] == "bomb":
        with open(path, "wb") as f:
            f.write(_bomb(int(a["inflated_mib"])))
    _leave()


def memory(params, device):
    """Memory no process maps (a memfd), or a file in the jail's /dev/shm, of ``mib``: the resident set of the job's
    processes never shows it."""
    a = params["args"]
    chunk = b"m" * (1 << 20)
    if a["kind"] == "memfd":
        fd = os.memfd_create("held")
        for _ in range(int(a["mib"])):
            os.write(fd, chunk)
    else:
        with open("/dev/shm/held", "wb") as f:
            for _ in range(int(a["mib"])):
                f.write(chunk)
                f.flush()
    raise RuntimeError("REPORT " + json.dumps({"held_mib": int(a["mib"]), "in": a["kind"]}))


def output(params, device):
    """``mib`` of output, then a wait past the job's wall-clock limit."""
    line = "o" * 1023 + "\n"
    for _ in range(int(params["args"]["mib"]) * 1024):
        sys.stdout.write(line)
    sys.stdout.flush()
    time.sleep(float(params["args"]["then_s"]))
    raise RuntimeError("REPORT " + json.dumps({"printed_mib": int(params["args"]["mib"])}))


def disk(params, device):
    """``mib`` written into the job's folder, then a wait past the job's wall-clock limit."""
    written = 0
    try:
        with open("/job/fill", "wb") as f:
            for _ in range(int(params["args"]["mib"])):
                f.write(b"d" * (1 << 20))
                f.flush()
                written += 1
    except OSError as e:
        print("the job's folder refused a write after %d MiB: %s" % (written, e.strerror), flush=True)
    time.sleep(float(params["args"]["then_s"]))
    raise RuntimeError("REPORT " + json.dumps({"written_mib": written}))


def threads(params, device):
    """As many threads as the job may start (up to ``count``), held until /job/release appears (or ``hold_s``
    passed): /job/holding says how many, for whoever watches from the host."""
    a = params["args"]
    release = threading.Event()
    started, refused = 0, ""
    try:
        for _ in range(int(a["count"])):
            threading.Thread(target=release.wait, daemon=True).start()
            started += 1
    except RuntimeError as e:
        refused = str(e)
    with open("/job/holding.part", "w") as f:
        f.write(str(started))
    os.rename("/job/holding.part", "/job/holding")  # whole when it appears
    deadline = time.monotonic() + float(a["hold_s"])
    while not os.path.exists("/job/release") and time.monotonic() < deadline:
        time.sleep(0.05)
    release.set()
    raise RuntimeError("REPORT " + json.dumps({"threads": started, "refused": refused}))
''',
}


# A case the profiler runs for real, first: its trace is written before the next case's factory runs. The honest
# run that ``plant_host_files`` is given ran it too: the host's file is named as its trace is.
TRACED_NAME = "sdpa"
TRACED_CASE = f"""[[cases]]
name = "{TRACED_NAME}"
target = "sdpa"
backend = "math"
batch = 1
q_heads = 2
seq_q = 64
head_dim = 32
dtype = "fp32"
"""


@dataclass(frozen=True)
class Walls:
    """The limits of the worker the attacks run on (``ATTNPROF_WORKER__*``): sizes in MiB, its wall-clock limit in
    seconds."""

    memory_mib: int = 768
    output_mib: int = 1
    disk_mib: int = 32
    max_processes: int = 600
    timeout_s: float = 60

    def env(self) -> dict[str, str]:
        # The jail's /tmp and /dev/shm have a size of their own: twice the memory limit, so that the memory limit is
        # what stops a file there.
        return {
            "ATTNPROF_WORKER__MEMORY_LIMIT_MIB": str(self.memory_mib),
            "ATTNPROF_WORKER__OUTPUT_LIMIT_MIB": str(self.output_mib),
            "ATTNPROF_WORKER__DISK_LIMIT_MIB": str(self.disk_mib),
            "ATTNPROF_WORKER__MAX_PROCESSES": str(self.max_processes),
            "ATTNPROF_WORKER__TMPFS_MIB": str(2 * self.memory_mib),
            "ATTNPROF_WORKER__TIMEOUT_S": str(self.timeout_s),
        }


@dataclass(frozen=True)
class HostFiles:
    """What the worker's host holds that no job may hand back, under ``root`` (root's alone, mode 0700):

    - ``canary``: a valid result document (the honest run's, with ``secret`` in its command), mode 0600;
    - ``host_out``: a folder as a job's ``out/`` is: ``result.json`` (the canary's copy) and ``traces/<trace>``;
    - ``host_traces``: a folder holding ``<trace>``, a gzip whose text holds ``secret``;
    - ``document``: the honest run's document as it was (the hard link's target, carried in the bundle).
    """

    root: Path
    secret: str
    canary: Path
    host_out: Path
    host_traces: Path
    trace: str
    document: bytes


def plant_host_files(root: Path, document: Mapping[str, Any]) -> HostFiles:
    """Write the host's files the attacks point at, from an honest run's result document of the attacks' testbed: one
    the service would store, so that a worker following a link to it would store the run, secret and all."""
    secret = "attnprof-secret-" + secrets.token_hex(8)
    traced = [c["trace"] for c in document.get("cases", []) if c.get("name") == TRACED_NAME and c.get("trace")]
    if not traced:
        raise ValueError(f"the honest run's document names no trace of a case {TRACED_NAME!r} (TRACED_CASE)")
    forged = json.loads(json.dumps(document))
    forged["run"]["id"] = "00000000-0000-4000-8000-" + secrets.token_hex(6)
    forged["run"]["command"] = f"attnprof profile {secret}"
    text = json.dumps(forged).encode()
    trace = gzip.compress(json.dumps({"traceEvents": [], "secret": secret}).encode())

    def write(path: Path, data: bytes) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    write(root / "canary.json", text)
    write(root / "out" / "result.json", text)
    write(root / "out" / "traces" / traced[0], trace)
    write(root / "traces" / traced[0], trace)
    return HostFiles(
        root=root,
        secret=secret,
        canary=root / "canary.json",
        host_out=root / "out",
        host_traces=root / "traces",
        trace=traced[0],
        document=json.dumps(document).encode(),
    )


def planted_bundle(host: HostFiles) -> dict[str, bytes]:
    """``PLANTED`` with the honest document beside it (``/job/src/planted/doc.json``: the hard link's target)."""
    return {**PLANTED, "planted/doc.json": host.document}


@dataclass(frozen=True)
class Attack:
    """One job that plants something in its folder or passes one of its limits, and what the worker must answer:
    ``reason``, a regular expression its failure reason matches (empty: the job is done, its run stored), and no
    trace named ``no_trace`` stored with its run. ``cases``: the suite's cases (TOML)."""

    name: str
    cases: str
    reason: str
    no_trace: str = ""


def _case(name: str, factory: str, **args: object) -> str:
    extra = "".join(f'args.{k} = "{v}"\n' for k, v in args.items())
    return f'[[cases]]\nname = "{name}"\ntarget = "planted.targets:{factory}"\n{extra}'


_NO_DOCUMENT = r"^the profiler exited with code 0 and wrote no valid result document: "
ATTACK_NAMES = (
    "links", "out_link", "traces_link", "fifo", "device", "hard_link", "gzip_bomb", "memfd", "dev_shm", "output",
    "disk",
)  # fmt: skip


def attacks(host: HostFiles, walls: Walls) -> dict[str, Attack]:
    """Every attack from outside but the processes' (``threads_case``), by name, in the order ``ATTACK_NAMES`` gives.
    The gzip bomb is 2 MB that inflate to 2 GiB."""
    then_s = 2 * walls.timeout_s  # past the job's wall-clock limit: only the limit under test stops it in time
    no_document = [
        (
            "links",
            _case("plant", "links", canary=host.canary),
            r"/job/out/result\.json: a symbolic link, not a regular file: not read",
        ),
        (
            "out_link",
            _case("plant", "out_link", host_out=host.host_out, canary=host.canary),
            r"/job/out: not a folder \(a link or a file\): not followed",
        ),
        ("fifo", _case("plant", "special", kind="fifo"), r"/job/out/result\.json: a FIFO, not a regular file"),
        (
            "device",
            _case("plant", "special", kind="device"),
            r"/job/out/result\.json: a symbolic link, not a regular file: not read",
        ),
        (
            "hard_link",
            _case("plant", "special", kind="hard_link", document="/job/src/planted/doc.json"),
            r"/job/out/result\.json: a file with 2 links: not read",
        ),
        (
            "gzip_bomb",
            _case("plant", "special", kind="bomb", inflated_mib=2048),
            r"/job/out/result\.json: inflates past the [\d,]+ bytes a document may hold",
        ),
    ]
    found = {name: Attack(name, cases, _NO_DOCUMENT + said) for name, cases, said in no_document}
    memory = rf"^out of host memory: the job reached the worker's limit of {walls.memory_mib:,} MiB"
    found.update(
        traces_link=Attack(
            "traces_link", TRACED_CASE + _case("plant", "traces_link", host_traces=host.host_traces), "", host.trace
        ),
        memfd=Attack("memfd", _case("hold", "memory", kind="memfd", mib=2 * walls.memory_mib), memory),
        dev_shm=Attack("dev_shm", _case("hold", "memory", kind="shm", mib=2 * walls.memory_mib), memory),
        output=Attack(
            "output",
            _case("print", "output", mib=3 * walls.output_mib, then_s=then_s),
            rf"^too much output: the job printed more than the worker's limit of {walls.output_mib:,} MiB",
        ),
        disk=Attack(
            "disk",
            _case("fill", "disk", mib=2 * walls.disk_mib, then_s=then_s),
            rf"^out of disk: the job's folder \(/job\) reached the worker's quota of {walls.disk_mib:,} MiB",
        ),
    )
    return {name: found[name] for name in ATTACK_NAMES}


def threads_case(*, count: int, hold_s: float) -> str:
    """The case of a job that holds as many threads as it may (up to ``count``) until released, or ``hold_s``."""
    return _case("crowd", "threads", count=count, hold_s=hold_s)


def job_folder(scratch_root: Path, job_id: str) -> Path | None:
    """``/job`` of ``job_id``'s first attempt, as its worker's host sees it while the job runs (``scratch_root``: the
    worker's ``ATTNPROF_WORKER__SCRATCH_DIR``)."""
    found = sorted((scratch_root / "attnprof-jobs").glob(f"{job_id}-a1-p*/job"))
    return found[0] if found else None


def took_s(job: Mapping[str, Any]) -> float | None:
    """Seconds from the job's start to its end, as the service recorded them."""
    if not job.get("started_at") or not job.get("finished_at"):
        return None
    started = datetime.fromisoformat(str(job["started_at"]).replace("Z", "+00:00"))
    finished = datetime.fromisoformat(str(job["finished_at"]).replace("Z", "+00:00"))
    return (finished - started).total_seconds()


def _text(data: bytes) -> str:
    if data[:2] == b"\x1f\x8b":
        with contextlib.suppress(zlib.error):
            data = zlib.decompressobj(wbits=31).decompress(data, 64 * 1024 * 1024)
    return data.decode("utf-8", "replace")


def judge(
    attack: Attack,
    job: Mapping[str, Any],
    *,
    run: Mapping[str, Any] | None,
    traces: Mapping[str, bytes],
    forbidden: Sequence[str],
    within_s: float,
) -> list[str]:
    """What did not hold after ``attack``'s job, in words (empty: every wall held): its status and reason; whether it
    ended within ``within_s`` of its start; whether a run was stored where none may be; whether a trace named
    ``no_trace`` was stored; whether any of ``forbidden`` (the host's secret, the worker's token) reached the reason,
    the stored run or a downloadable trace (``traces``: every trace of the run, name -> bytes as downloaded)."""
    problems: list[str] = []
    reason = str(job.get("reason") or "")
    want = "failed" if attack.reason else "done"
    if job.get("status") != want:
        problems.append(f"status {job.get('status')!r}, expected {want!r} (reason: {reason[:300]!r})")
    if attack.reason and not re.search(attack.reason, reason):
        problems.append(f"the reason does not match {attack.reason!r}: {reason[:300]!r}")
    took = took_s(job)
    if took is None or took > within_s:
        problems.append(f"the job took {took} s from its start to its end, more than {within_s} s")
    if attack.reason and (job.get("run_id") or run):
        problems.append(f"a run was stored: {job.get('run_id')}")
    if not attack.reason and not run:
        problems.append("no run was stored")
    if attack.no_trace and attack.no_trace in traces:
        problems.append(f"a trace named {attack.no_trace} was stored: {_text(traces[attack.no_trace])[:200]!r}")
    texts = {"the reason": reason, "the run": json.dumps(run or {})}
    texts.update({f"trace {name}": _text(data) for name, data in traces.items()})
    for where, text in texts.items():
        problems += [f"{where} holds {word!r}" for word in forbidden if word and word in text]
    return problems
