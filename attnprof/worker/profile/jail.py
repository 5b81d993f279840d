"""The jail a job's code runs in: bubblewrap namespaces around the profiling subprocess (docs/isolation.md,
section 1).

What the job gets, and nothing else:

- its own PID namespace (bubblewrap's reaper is PID 1 there: when the profiler ends, every process the job
  started ends with it, double-forked daemons included) and a ``/proc`` that shows only those processes;
- its own network namespace (a loopback of its own: no Redis, Postgres, service or outside address), and
  its own IPC and UTS namespaces;
- a filesystem built from nothing: ``/usr`` and the Python installation read-only, a few files of ``/etc``
  (a ``passwd`` and ``group`` of its own, the loader's cache), the job's scratch folder at ``/job`` (the only
  writable place besides small ``/tmp`` and ``/dev/shm`` of its own), the peaks cache read-only at ``/peaks``,
  and the GPU's device nodes when it has one. The worker's home, its settings, other jobs' folders, the
  repository the worker runs from and the database's files are not there at all;
- a uid that is not the worker's. A worker running as root starts the job as ``job_user`` (``nobody`` by
  default) with no capabilities, no new privileges and no supplementary groups, inside a user namespace of
  its own; an unprivileged worker starts it in a user namespace in which it is ``job_user``'s uid.

``self_test`` runs a probe through the same jail at worker start: the worker refuses to start unless every
wall holds (or ``trusted_single_tenant`` is set and no jail can be built, which it then says loudly).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from attnprof.worker.profile.sandbox import die_with_parent

JOB_ROOT = Path("/job")
PEAKS_DIR = Path("/peaks")
COUNTERS_DIR = Path("/counters")  # the job's project's counter cache, read-only (attnprof.core.counter_cache)
# Top-level system paths a merged-/usr Debian or Ubuntu keeps as links into /usr; older layouts have real folders.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /etc, only what the loader and the C library read; never shadow, ssh keys, or the worker's configuration.
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
ETC_WRITTEN = ("passwd", "group", "hosts", "nsswitch.conf")  # written per job by ``prepare``
_GPU_SHARED_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)


class JailUnavailable(Exception):
    """No jail can be built on this host; the message says what is missing and how to provide it."""


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _prefixes() -> list[Path]:
    return sorted({Path(p).resolve() for p in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix)})


def _profiler_package() -> Path:
    import attnprof.core

    return Path(attnprof.core.__file__).resolve().parent


def profiler_parent() -> Path | None:
    """The folder that holds the top-level ``attnprof`` package when it is not installed into the Python that runs it
    (a checkout run with ``PYTHONPATH=.``, an editable install): it goes on the job's ``PYTHONPATH``. Only
    ``attnprof/core`` is bound there (``runtime_paths``), so the job imports ``attnprof`` as a namespace package that
    holds the profiler and nothing else of ours."""
    package = _profiler_package()
    return None if any(package.is_relative_to(p) for p in _prefixes()) else package.parents[1]


def runtime_paths() -> list[Path]:
    """What the profiler needs to run: the Python installation (and the virtual environment it runs from), and the
    ``attnprof.core`` package itself when it is not inside them (an editable install points into a checkout:
    the package folder is bound, never the checkout around it)."""
    found = _prefixes()
    return [*found, _profiler_package()] if profiler_parent() is not None else found


def gpu_nodes(minor: int | None) -> list[str]:
    """The device nodes a job on GPU ``minor`` (NVML's minor number; ``None``: every GPU of the host) needs."""
    nodes = [n for n in _GPU_SHARED_NODES if os.path.exists(n)]
    nodes += sorted(glob.glob("/dev/nvidia-caps/*"))
    if minor is not None and os.path.exists(f"/dev/nvidia{minor}"):
        nodes.append(f"/dev/nvidia{minor}")
    else:
        nodes += sorted(n for n in glob.glob("/dev/nvidia[0-9]*") if n[len("/dev/nvidia") :].isdigit())
    return nodes


def sys_paths(*, gpu: bool) -> list[str]:
    """What of ``/sys`` a job sees: the CPU topology that thread counts come from and, with a GPU, the PCI tree and
    the NVIDIA modules that NVML and the CUDA driver read. Never the host's cgroups, its other devices' classes or
    its firmware tables."""
    paths = ["/sys/devices/system/cpu", "/sys/devices/system/node"]
    if gpu:
        paths += [*sorted(glob.glob("/sys/devices/pci*")), "/sys/bus/pci", "/sys/module/nvidia"]
        paths.append("/sys/module/nvidia_uvm")
    return [p for p in paths if os.path.exists(p)]


def hidden_argv(argv: Sequence[str]) -> tuple[list[str], int]:
    """``argv`` (a bubblewrap command) with its options moved into a memory file bubblewrap reads (``--args``), and
    that file's descriptor, to pass to the child and close after: the jail's PID 1 is bubblewrap, and its command
    line, which every process in the jail may read, then names no host path (the binds are in the options; the
    command after ``--`` stays on the line, and names only paths as the job sees them)."""
    cut = list(argv).index("--")
    fd = os.memfd_create("attnprof-jail-args", os.MFD_CLOEXEC)
    os.write(fd, b"".join(a.encode() + b"\0" for a in argv[1:cut]))
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return [argv[0], "--args", str(fd), *argv[cut:]], fd


Strategy = Literal["privileged", "userns"]


@dataclass(frozen=True)
class Jail:
    """One worker's jail.

    ``strategy`` says how it is built. ``privileged`` (a root worker with CAP_SYS_ADMIN): bubblewrap runs as root
    to build the mounts, then the job drops to ``job_uid`` with no capabilities and enters a user namespace of its
    own. ``userns``: bubblewrap itself runs unprivileged in a user namespace, started as ``job_uid`` by a root
    worker (the launcher drops to it first: ``run_as``), or as the worker's own uid by an unprivileged worker, in
    which case the job is ``job_uid`` only inside the namespace."""

    bwrap: str
    job_user: str
    job_uid: int
    job_gid: int
    as_root: bool
    strategy: Strategy
    ro_binds: tuple[Path, ...]
    devices: tuple[str, ...] = ()
    tmpfs_bytes: int = 1024 * 1024 * 1024
    max_processes: int = 4096

    @classmethod
    def build(
        cls,
        *,
        job_user: str = "nobody",
        devices: Sequence[str] = (),
        extra_ro_binds: Sequence[str] = (),
        tmpfs_mib: int = 1024,
        max_processes: int = 4096,
        strategy: Strategy | None = None,
    ) -> Jail:
        """The jail for this host (``strategy`` by default: ``privileged`` for a root worker, else ``userns``), or
        ``JailUnavailable`` saying why there can be none."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise JailUnavailable("bubblewrap is not installed (apt-get install bubblewrap)")
        try:
            user = pwd.getpwnam(job_user)
        except KeyError:
            raise JailUnavailable(
                f"the job user {job_user!r} does not exist (useradd --system {job_user}, or set "
                "ATTNPROF_WORKER__JOB_USER to an unprivileged user)"
            ) from None
        if user.pw_uid == 0:
            raise JailUnavailable(f"the job user {job_user!r} is root: jobs must run as an unprivileged user")
        as_root = os.geteuid() == 0
        strategy = strategy or ("privileged" if as_root else "userns")
        if strategy == "privileged" and not as_root:
            raise JailUnavailable("the privileged jail needs a worker running as root")
        if strategy == "privileged":
            for tool in ("setpriv", "unshare"):
                if not Path("/usr/bin", tool).exists():
                    raise JailUnavailable(f"/usr/bin/{tool} is missing (util-linux): a root worker needs it")
        elif user.pw_uid == os.geteuid():
            raise JailUnavailable(f"the job user {job_user!r} is the worker's own user")
        binds = [*runtime_paths(), *(Path(p).resolve() for p in extra_ro_binds)]
        return cls(
            bwrap=bwrap,
            job_user=job_user,
            job_uid=user.pw_uid,
            job_gid=user.pw_gid,
            as_root=as_root,
            strategy=strategy,
            ro_binds=tuple(sorted(set(binds))),
            devices=tuple(devices),
            tmpfs_bytes=tmpfs_mib * 1024 * 1024,
            max_processes=max_processes,
        )

    # --- the command ------------------------------------------------------------------------------------

    def prepare(self, job: Path, *, etc: Path) -> None:
        """Make ``job`` (``/job`` in the jail) the job's: (root worker) every file in it owned by the job's uid, so the
        job can write there and nowhere else; and write its ``passwd``, ``group`` and the rest into ``etc``, a
        folder of the worker's that the jail binds read-only. Called after the bundle is unpacked."""
        uid, gid = self.inside_ids
        home = JOB_ROOT / "home"
        users = ["root:x:0:0:root:/nonexistent:/usr/sbin/nologin", f"{self.job_user}:x:{uid}:{gid}::{home}:/bin/false"]
        groups = ["root:x:0:", f"{self.job_user}:x:{gid}:"]
        if uid != 65534:
            users.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
            groups.append("nogroup:x:65534:")
        written = {
            "passwd": "\n".join(users) + "\n",
            "group": "\n".join(groups) + "\n",
            "hosts": "127.0.0.1 localhost\n::1 localhost\n",
            # Only these files: the host's own may name NSS modules (systemd, sss, ldap) that are not in the jail.
            "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
        }
        etc.mkdir(mode=0o755, exist_ok=True)
        for name, text in written.items():
            (etc / name).write_text(text)
            (etc / name).chmod(0o644)
        if self.as_root:
            # Before the job ran: the tree is the worker's own unpacking (a checked bundle), so walking it is safe.
            os.chown(job, self.job_uid, self.job_gid)
            for root, dirs, files in os.walk(job):
                for name in [*dirs, *files]:
                    os.lchown(os.path.join(root, name), self.job_uid, self.job_gid)

    def argv(
        self,
        command: Sequence[str],
        *,
        scratch: Path,
        etc: Path,
        peaks: Path | None,
        cwd: Path = JOB_ROOT,
        counters: Path | None = None,
    ) -> list[str]:
        """``command`` (paths as the job sees them: under ``/job``, ``/peaks`` and ``/counters``) wrapped in the jail:
        ``scratch`` is bound at ``/job``, the files ``prepare`` wrote in ``etc`` at ``/etc``, ``counters`` (the job's
        project's counter cache) read-only at ``/counters``."""
        args = [
            self.bwrap,
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "attnprof-job",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for top in _SYSTEM_DIRS:
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        # Made first, world-readable: bubblewrap would make it 0700 as the parent of the files below, and a job
        # could then read none of them (its own passwd entry included).
        args += ["--perms", "0755", "--dir", "/etc"]
        for name in _ETC_FILES:
            if os.path.exists(name):
                args += ["--ro-bind", name, name]
        for name in ETC_WRITTEN:
            args += ["--ro-bind", str(etc / name), f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        for tmpfs in ("/tmp", "/dev/shm"):
            args += ["--perms", "1777", "--size", str(self.tmpfs_bytes), "--tmpfs", tmpfs]
        for node in self.devices:
            args += ["--dev-bind", node, node]
        system = sys_paths(gpu=bool(self.devices))
        made: set[str] = {"/", "/usr", "/etc", "/proc", "/dev", "/tmp", *_SYSTEM_DIRS}
        under_usr = [p for p in self.ro_binds if p == Path("/usr") or p.is_relative_to("/usr")]  # bound with /usr
        binds = [(str(p), str(p)) for p in self.ro_binds if p not in under_usr]
        binds += [(s, s) for s in system if os.path.exists(s)]
        if peaks is not None and peaks.is_dir():
            binds.append((str(peaks), str(PEAKS_DIR)))
        if counters is not None and counters.is_dir():
            binds.append((str(counters), str(COUNTERS_DIR)))
        for source, dest in binds:
            # bubblewrap makes missing parents private (0700): a job user could not walk through them.
            for parent in _ancestors(dest):
                if parent not in made:
                    args += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            args += ["--ro-bind", source, dest]
            made.add(dest)
        args += ["--bind", str(scratch), str(JOB_ROOT), "--remount-ro", "/", "--chdir", str(cwd)]
        if self.strategy == "privileged":
            # bubblewrap ran as root to build the mounts; the job itself runs as job_user, with nothing to gain.
            args += [
                "--",
                "/usr/bin/setpriv",
                f"--reuid={self.job_uid}",
                f"--regid={self.job_gid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
                "/usr/bin/unshare",
                "--user",
                "--",
            ]
        else:
            args += [
                "--unshare-user",
                "--disable-userns",
                "--uid",
                str(self.job_uid),
                "--gid",
                str(self.job_gid),
                "--cap-drop",
                "ALL",
                "--",
            ]
        return [*args, *command]

    @property
    def inside_ids(self) -> tuple[int, int]:
        """The job's uid and gid as it sees them: a privileged jail's user namespace maps none, so they read as the
        overflow ids (65534); an unprivileged one maps the job user's."""
        return (65534, 65534) if self.strategy == "privileged" else (self.job_uid, self.job_gid)

    def env(self) -> dict[str, str]:
        """What the job's environment says of its user (``getpass.getuser`` reads these before ``/etc/passwd``)."""
        return {"USER": self.job_user, "LOGNAME": self.job_user}

    @property
    def run_as(self) -> tuple[int, int] | None:
        """(uid, gid) the launcher drops to before it starts bubblewrap: a root worker's unprivileged jail."""
        return (self.job_uid, self.job_gid) if self.as_root and self.strategy == "userns" else None

    # --- the self-test ----------------------------------------------------------------------------------

    def hidden(self, paths: Iterable[Path]) -> list[Path]:
        """Of ``paths`` (the worker's home, its code, other jobs' folders), what must be invisible in the jail: each
        one that exists, or where a bound path lies inside it (a Python installation in the worker's home), the
        entries beside the way down to it."""
        found: list[Path] = []
        for path in (Path(p) for p in paths):
            if not path.exists():
                continue
            inside = [b for b in self.ro_binds if b.is_relative_to(path)]
            if not inside:
                found.append(path)
                continue
            if any(b == path for b in inside):
                continue
            ways = {path / b.relative_to(path).parts[0] for b in inside}
            with contextlib.suppress(OSError):
                found += sorted(p for p in path.iterdir() if p not in ways)[:20]
        return found

    def self_test(
        self, scratch_root: Path, *, forbidden: Iterable[Path] = (), addresses: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Run a probe through the jail and raise ``JailUnavailable`` unless each wall holds: its PIDs are its own,
        it holds no capability and runs as no one the worker is, ``forbidden`` paths and ``/etc/shadow`` are
        invisible, nothing outside ``/job`` is writable, and no TCP connection reaches ``addresses``
        (the broker, the service)."""
        scratch_root.mkdir(parents=True, exist_ok=True)
        scratch = Path(
            subprocess.check_output(["mktemp", "-d", str(scratch_root / "selftest-XXXXXX")], text=True).strip()
        )
        job, etc = scratch / "job", scratch / "etc"
        job.mkdir()
        try:
            self.prepare(job, etc=etc)
            probe = {
                "worker_pid": os.getpid(),
                "worker_uid": os.geteuid(),
                "forbidden": [str(p) for p in [Path("/etc/shadow"), *self.hidden(forbidden)]],
                "addresses": sorted(set(addresses)),
                "host_paths": [str(scratch_root.resolve())],
            }
            (job / "probe.json").write_text(json.dumps(probe))
            if self.as_root:
                os.chown(job / "probe.json", self.job_uid, self.job_gid)
            command = [sys.executable, "-I", "-S", "-c", _PROBE, str(JOB_ROOT / "probe.json")]
            wrapped, args_fd = hidden_argv(self.argv(command, scratch=job, etc=etc, peaks=None))
            try:
                done = subprocess.run(
                    die_with_parent(wrapped, run_as=self.run_as),
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                    pass_fds=(args_fd,),
                )
            finally:
                os.close(args_fd)
            if done.returncode != 0:
                why = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise JailUnavailable(
                    f"bubblewrap could not start a job (exit {done.returncode}): {' / '.join(why) or 'no output'}"
                    + _HINT
                )
            holes = json.loads(done.stdout.strip().splitlines()[-1])
            owner = (job / "attnprof-probe").stat().st_uid
            if owner == os.geteuid() and self.as_root:
                holes.append(f"the job's files belong to the worker's uid {owner}")
            if holes:
                raise JailUnavailable("the jail leaks: " + "; ".join(holes))
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(scratch)


_HINT = (
    ". In a container, the GPU worker needs user namespaces and mounts: see the gpu-worker service in "
    "docker-compose.yml (security_opt seccomp=unconfined, apparmor=unconfined, systempaths=unconfined); the "
    "privileged jail also needs CAP_SYS_ADMIN"
)

# Runs inside the jail with -I -S: the standard library only. Prints one JSON list: the walls that did not hold.
_PROBE = r"""
import json, os, socket, sys
p = json.load(open(sys.argv[1]))
holes = []
pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
if p["worker_pid"] in pids and os.path.exists("/proc/%d/environ" % p["worker_pid"]) and len(pids) > 8:
    holes.append("the job sees the host's processes")
if max(pids) > 64:
    holes.append("the job is not in a PID namespace of its own (it sees PID %d)" % max(pids))
with open("/proc/self/status") as f:
    status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
if int(status.get("CapEff", "0"), 16) or int(status.get("CapPrm", "0"), 16):
    holes.append("the job holds capabilities (CapEff %s)" % status.get("CapEff"))
if status.get("NoNewPrivs", "0").strip() != "1":
    holes.append("the job may gain privileges (no_new_privs is off)")
if os.getuid() == 0:
    holes.append("the job runs as root in its namespace")
try:
    import pwd
    pwd.getpwuid(os.getuid())
except (KeyError, OSError) as e:
    holes.append("the job cannot look up its own user (%s): /etc/passwd unreadable?" % e)
for path in p["forbidden"]:
    if os.path.exists(path):
        holes.append("the job sees " + path)
for path in ("/usr/attnprof-probe", "/attnprof-probe", "/etc/attnprof-probe", "/peaks/attnprof-probe"):
    try:
        open(path, "w").close()
        holes.append("the job can write " + path)
    except OSError:
        pass
try:
    open("/job/attnprof-probe", "w").close()
except OSError as e:
    holes.append("the job cannot write its scratch folder: %s" % e)
for host, port in p["addresses"]:
    try:
        socket.create_connection((host, port), timeout=2).close()
        holes.append("the job reached %s:%d" % (host, port))
    except OSError:
        pass
with open("/proc/1/cmdline", "rb") as f:
    first = f.read().decode("utf-8", "replace")
for path in p["host_paths"]:
    if path in first:
        holes.append("the jail's PID 1 names the host path " + path + " in its command line")
if os.path.exists("/sys/fs/cgroup"):
    holes.append("the job sees the host's cgroups (/sys/fs/cgroup)")
with open("/proc/net/dev") as f:
    devs = [line.split(":")[0].strip() for line in f.readlines()[2:]]
if [d for d in devs if d != "lo"]:
    holes.append("the job has network interfaces: " + ", ".join(d for d in devs if d != "lo"))
print(json.dumps(holes))
"""
