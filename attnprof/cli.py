"""The ``attnprof`` console script: one command, each verb imported only when it is used.

``attnprof submit`` must not pay for torch, FastAPI or SQLAlchemy, so verbs are registered by name
and the Typer app that owns a verb is imported only when that verb runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version

# verb -> (module holding a Typer app named `app`, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "profile": ("attnprof.core.cli", "Profile every kernel of a suite's cases into a result document."),
    "report": ("attnprof.core.cli", "Print the per-kernel table of a result document."),
    "compare": ("attnprof.core.cli", "Compare baseline result(s) with a candidate: pass, warn or fail."),
    "paired": (
        "attnprof.core.cli",
        "Profile two source trees interleaved on one device and compare them pair by pair (alias: ab).",
    ),
    "bisect": (
        "attnprof.core.cli",
        "Find the commit between two refs of a checkout that made a step (A/B probes on one device); confirm it.",
    ),
    "changepoints": ("attnprof.core.cli", "Find change points in a chronological series of results."),
    "schema": ("attnprof.core.cli", "Print the JSON Schema of a document."),
    "calibrate": ("attnprof.core.cli", "Measure this host's peak bandwidth and matmul rates into the peaks cache."),
    "serve": ("attnprof.server.cli", "Run the HTTP API of the service."),
    "db": ("attnprof.server.cli", "Migrate the service's database (db upgrade)."),
    "admin": ("attnprof.server.cli", "Create projects, project tokens and worker tokens."),
    "upload": ("attnprof.client.cli", "Upload a result document to the service; exit 1 when it fails its comparison."),
    "submit": ("attnprof.client.cli", "Submit a suite as a job to the service; --wait exits by its verdict."),
    "action": ("attnprof.client.action", "The GitHub Action's step (inputs from ATTNPROF_* variables)."),
    "worker": ("attnprof.worker.cli", "Run a profile worker (one per GPU) or the analysis worker."),
    "demo": (
        "attnprof.worker.cli",
        "Run the whole flow on this machine: service, workers, two jobs and their verdicts.",
    ),
}

# Other names a verb answers to: typed, they run the verb (its module registers the command under both names).
ALIASES: dict[str, str] = {"ab": "paired"}

# The extras of pyproject.toml by the top-level modules they install: a verb that needs one of these in the base
# install (the CI client) says which extra to add.
EXTRAS = {
    "profile": ("torch", "pynvml"),
    "server": (
        "fastapi",
        "starlette",
        "uvicorn",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "pydantic_settings",
        "celery",
        "kombu",
        "redis",
        "jinja2",
        "plotly",
        "multipart",
        "prometheus_client",
    ),
}


def available() -> dict[str, tuple[str, str]]:
    """The verbs whose package is installed."""
    out = {}
    for verb, (module, text) in VERBS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            out[verb] = (module, text)
    return out


def usage() -> str:
    verbs = available()
    width = max(len(v) for v in verbs)
    lines = [
        "Usage: attnprof VERB [ARGS]...",
        "",
        "  Performance-regression CI for attention kernels.",
        "",
        "Verbs:",
        *[f"  {v.ljust(width)}  {text}" for v, (_, text) in verbs.items()],
        "",
        "Run `attnprof VERB --help` for a verb's options.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if args else 2)
    if args[0] == "--version":
        try:
            print(f"attnprof {version('attnprof')}")
        except PackageNotFoundError:
            print("attnprof (not installed)")
        sys.exit(0)
    verb = ALIASES.get(args[0], args[0])
    if verb not in VERBS:
        print(f"error: unknown verb {args[0]!r}; the verbs are: {', '.join(available())}", file=sys.stderr)
        sys.exit(2)
    # Only the verb's own module is imported: the others' packages (the server's, the worker's) need not be
    # installed, and nothing of theirs runs for a client verb. An alias stays in ``args``: the module's app knows it,
    # and the command line a document records is the one typed.
    module = VERBS[verb][0]
    try:
        app = importlib.import_module(module).app
        if verb in ("profile", "paired", "bisect") and argv is None:
            # The console script's profiling process ends as soon as its result is written (``exit_with``); called
            # in process with ``argv``, the caller's process is left alone.
            from attnprof.core.process_exit import exit_with

            exit_with(lambda: app(args=args, prog_name="attnprof"))
        app(args=args, prog_name="attnprof")
    except ModuleNotFoundError as exc:
        extra = next((x for x, names in EXTRAS.items() if (exc.name or "").split(".")[0] in names), None)
        if extra is None:
            raise
        print(
            f"error: attnprof {args[0]} needs {exc.name}, which this install lacks: pip install 'attnprof[{extra}]'",
            file=sys.stderr,
        )
        sys.exit(2)
