"""The local verbs: ``profile``, ``report``, ``compare``, ``paired`` (alias ``ab``), ``changepoints``, ``schema``,
``calibrate``.

They work on files only (no server). ``attnprof`` registers them; ``python -m attnprof.core`` runs
them directly (that is how a worker runs a suite in its sandboxed subprocess). Exit codes:
0 success (a comparison that passes or warns), 1 failed cases or a failing comparison, 2 bad input
(nothing run), as docs/architecture.md ("Documents") and the CLI contract say.
"""

from __future__ import annotations

import json
import shlex
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnprof.core.documents import load_result, result_json_schema
from attnprof.core.errors import AttnprofError
from attnprof.core.process_exit import exit_with

if TYPE_CHECKING:  # the runner imports torch: only the profile verb loads it, at run time
    from attnprof.core.documents import ResultDocument
    from attnprof.core.measure.paired import PairedOptions, PairedOutcome
    from attnprof.core.measure.runner import ProfileOptions
    from attnprof.core.suite import Suite

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Profile attention kernels and compare runs.")


class Format(StrEnum):
    table = "table"
    markdown = "markdown"
    json = "json"


class DeviceChoice(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class FirstBuildsChoice(StrEnum):
    apart = "apart"
    together = "together"


class Counters(StrEnum):
    none = "none"
    ncu = "ncu"
    cached = "cached"


class SchemaName(StrEnum):
    result = "result"
    comparison = "comparison"
    paired = "paired"


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@app.command()
def profile(
    suite: Annotated[Path, typer.Argument(help="suite file (TOML)")],
    device: Annotated[DeviceChoice, typer.Option(help="auto: the GPU if there is one")] = DeviceChoice.auto,
    counters: Annotated[
        Counters,
        typer.Option(
            help="ncu: a Nsight Compute counter pass over every case; cached: counters kept from earlier runs of the "
            "same kernels (testbed, software, shapes), ncu only for the kernels not kept (where ncu is installed)"
        ),
    ] = Counters.none,
    out: Annotated[Path, typer.Option(help="where to write the result document")] = Path("attnprof-result.json"),
    trace_dir: Annotated[Path | None, typer.Option(help="where to save traces (default: beside --out)")] = None,
    case: Annotated[list[str] | None, typer.Option(help="only cases whose id matches (glob; repeatable)")] = None,
    format: Annotated[Format, typer.Option(help="how to print the report")] = Format.table,
    quiet: Annotated[bool, typer.Option(help="print no report and no progress")] = False,
    seed: Annotated[int, typer.Option(help="seed of the random inputs")] = 0,
    cache_dir: Annotated[Path, typer.Option(help="peaks and counters cache")] = Path.home() / ".cache" / "attnprof",
    counters_dir: Annotated[
        Path | None, typer.Option(help="the counter cache's folder (default: counters/ in --cache-dir)")
    ] = None,
    pid_namespace: Annotated[
        bool,
        typer.Option(
            "--pid-namespace",
            help="running in a PID namespace of its own (a worker's jail): record the GPU's processes, count none",
        ),
    ] = False,
) -> None:
    """Profile every case of SUITE and write the result document (exit 1 if a case failed, 2 on bad input)."""
    from attnprof.core.suite import load_suite, select_cases

    try:
        parsed = load_suite(suite)
        selected = select_cases(parsed, case) if case else None
        from attnprof.core.measure.runner import ProfileOptions, resolve_device

        resolve_device(device.value)
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    traces = trace_dir if trace_dir is not None else out.with_name(out.name.removesuffix(".json") + ".traces")
    options = ProfileOptions(
        device=device.value,
        counters=counters.value,
        trace_dir=traces,
        cache_dir=cache_dir,
        counters_dir=counters_dir,
        seed=seed,
        cases=selected,
        command=shlex.join(["attnprof", *sys.argv[1:]]),
        own_pid_namespace=pid_namespace,
    )
    try:
        doc = _profile_with_progress(parsed, options, quiet)
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(doc.to_json() + "\n")
    if not quiet:
        _print_report(doc, format)
        typer.echo(f"\nwrote {out} and traces in {traces}/", err=True)
    failed = [c for c in doc.cases if c.status == "failed"]
    if failed:
        typer.echo(f"{len(failed)} case(s) failed: " + ", ".join(c.id for c in failed), err=True)
        raise typer.Exit(1)


@app.command()
def calibrate(
    device: Annotated[DeviceChoice, typer.Option(help="auto: the GPU if there is one")] = DeviceChoice.auto,
    cache_dir: Annotated[Path, typer.Option(help="peaks cache")] = Path.home() / ".cache" / "attnprof",
) -> None:
    """Measure this host's peaks (a large copy, a matmul per dtype) into the peaks cache, or find them there.

    Prints the cache file. When no calibration could be confirmed (the host was busy), the file is not written:
    the reason goes to standard error and the exit status stays 0, since each profile run then measures its own."""
    from attnprof.core.measure.runner import calibrate as measure

    try:
        path, not_cached = measure(device.value, cache_dir)
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    if not_cached:
        typer.echo(f"warning: {not_cached}; each profile run will measure its own", err=True)
    typer.echo(str(path))


@app.command()
def canary(
    device: Annotated[DeviceChoice, typer.Option(help="auto: the GPU if there is one")] = DeviceChoice.auto,
) -> None:
    """Run this host's canary (a copy, a matmul per dtype, an empty kernel's launch, one fixed attention case, the
    clocks while they run) and print its figures as JSON: what a profile worker sends the service to show its host
    is healthy."""
    from attnprof.core.measure.canary import run
    from attnprof.core.measure.runner import resolve_device

    try:
        found = run(resolve_device(device.value))
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    typer.echo(json.dumps(found))


PAIRED_ALIAS = "ab"
"""The paired verb's first name, still typed (and run by workers): the same command, its default folder its own."""


def paired_out(invoked_as: str | None) -> Path:
    """The paired verb's default output folder: ``attnprof-paired``, or ``attnprof-ab`` where the verb was typed by its
    alias, so a command line written for ``ab`` writes where it always did."""
    return Path("attnprof-ab" if invoked_as == PAIRED_ALIAS else "attnprof-paired")


@app.command("paired")
def paired(
    ctx: typer.Context,
    suite: Annotated[Path, typer.Argument(help="suite file (TOML): the cases both trees run")],
    base: Annotated[Path, typer.Option(help="the merge base's source tree (the baseline)")],
    head: Annotated[Path, typer.Option(help="the head's source tree (the candidate)")],
    out: Annotated[
        Path | None,
        typer.Option(
            help="folder for result.json (head), base.json, paired.json, comparison.json (default: attnprof-paired; "
            f"attnprof-ab when typed as {PAIRED_ALIAS})",
            show_default=False,
        ),
    ] = None,
    device: Annotated[DeviceChoice, typer.Option(help="auto: the GPU if there is one")] = DeviceChoice.auto,
    case: Annotated[list[str] | None, typer.Option(help="only cases whose id matches (glob; repeatable)")] = None,
    max_pairs: Annotated[
        int | None,
        typer.Option(
            min=2,
            max=1000,
            help="pairs of rounds a case may take at most, the count alone (default: each case's device-time "
            "budget, \\[suite.timing] paired_budget, within paired_floor_pairs and paired_max_pairs)",
        ),
    ] = None,
    record: Annotated[
        bool, typer.Option(help="run every case to --max-pairs (or paired_max_pairs), without stopping early")
    ] = False,
    first_builds: Annotated[
        FirstBuildsChoice,
        typer.Option(
            help="a case's first build on each side: apart (one after the other, so code that tunes itself by "
            "timing, e.g. Triton's autotune, tunes on an idle device) or together (both at once: faster)"
        ),
    ] = FirstBuildsChoice.apart,
    quiet: Annotated[bool, typer.Option(help="print no report and no progress")] = False,
    seed: Annotated[int, typer.Option(help="seed of the random inputs")] = 0,
    cache_dir: Annotated[Path, typer.Option(help="peaks cache")] = Path.home() / ".cache" / "attnprof",
    pid_namespace: Annotated[
        bool, typer.Option("--pid-namespace", help="running in a PID namespace of its own (a worker's jail)")
    ] = False,
) -> None:
    """Profile SUITE on two source trees, interleaved on one device, and compare them pair by pair (alias: ab).

    Each tree runs in a process of its own that imports only that tree; per case, warm-up pairs until both sides'
    rounds agree, then rounds alternate base, head, head, base, ... and a case stops once its pairs settle the answer
    (slower, faster, or the same within the paired minimum effect) or its budget of device time is spent. Exit 0 when
    the comparison passes or warns, 1 when it fails or a head case failed, 2 on bad input."""
    from attnprof.core.suite import load_suite, select_cases

    if out is None:
        out = paired_out(ctx.info_name)
    try:
        parsed = load_suite(suite)
        selected = select_cases(parsed, case) if case else None
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    from attnprof.core.measure.paired import PairedOptions, PairedRunError

    options = PairedOptions(
        device=device.value,
        cache_dir=cache_dir,
        trace_dir=out / "traces",
        base_trace_dir=out / "base-traces",
        seed=seed,
        command=shlex.join(["attnprof", *sys.argv[1:]]),
        own_pid_namespace=pid_namespace,
        cases=selected,
        max_pairs=max_pairs,
        stop_early=not record,
        first_builds="together" if first_builds is FirstBuildsChoice.together else "apart",
    )
    try:
        outcome = _paired_with_progress(parsed, suite, base, head, options, quiet)
    except PairedRunError as exc:  # a side crashed or could not start: the run failed, the input was fine
        raise fail(str(exc), code=1) from None
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    from attnprof.core.analysis.paired import compare_paired
    from attnprof.core.analysis.render import render_table

    out.mkdir(parents=True, exist_ok=True)
    comparison = compare_paired(outcome.base, outcome.head, outcome.paired)
    (out / "result.json").write_text(outcome.head.to_json() + "\n")
    (out / "base.json").write_text(outcome.base.to_json() + "\n")
    (out / "paired.json").write_text(outcome.paired.to_json() + "\n")
    (out / "comparison.json").write_text(comparison.to_json() + "\n")
    if not quiet:
        typer.echo(render_table(comparison))
        typer.echo(f"\nwrote result.json (head), base.json, paired.json and comparison.json in {out}/", err=True)
    failed = [c for c in outcome.head.cases if c.status == "failed"]
    if failed:
        typer.echo(f"{len(failed)} head case(s) failed: " + ", ".join(c.id for c in failed), err=True)
    raise typer.Exit(1 if failed or comparison.verdict == "fail" else 0)


# The alias runs the same command; only ``paired`` is listed (its help says "alias: ab").
app.command(PAIRED_ALIAS, hidden=True)(paired)


@app.command()
def bisect(
    suite: Annotated[Path, typer.Argument(help="suite file, relative to the checkout's root (read from --bad's tree)")],
    good: Annotated[str, typer.Option(help="the last good commit (any ref git knows)")],
    bad: Annotated[str, typer.Option(help="the first bad commit (any ref git knows; a descendant of --good)")],
    repo: Annotated[Path, typer.Option(help="the git checkout")] = Path("."),
    case: Annotated[list[str] | None, typer.Option(help="only cases whose id matches (glob; repeatable)")] = None,
    effect: Annotated[
        float | None,
        typer.Option(
            help="the step's size, as a fraction (0.05: 5% slower), from an alert; without it the first probe "
            "measures --bad against --good"
        ),
    ] = None,
    low: Annotated[float | None, typer.Option(help="the low end of the step's interval (with --effect)")] = None,
    high: Annotated[float | None, typer.Option(help="the high end of the step's interval (with --effect)")] = None,
    out: Annotated[Path, typer.Option(help="folder for bisect.json")] = Path("attnprof-bisect"),
    device: Annotated[DeviceChoice, typer.Option(help="auto: the GPU if there is one")] = DeviceChoice.auto,
    cache_dir: Annotated[Path, typer.Option(help="peaks cache")] = Path.home() / ".cache" / "attnprof",
) -> None:
    """Find which commit between --good and --bad made a step on SUITE's cases: midpoints against the last good
    commit, interleaved on this device (A/B), then the culprit against its parent. Exit 0 when a culprit is confirmed, 1
    when the step is spread over several commits, was not reproduced or sits among commits that could not be
    measured, 2 on bad input."""
    from attnprof.core.bisect import Step
    from attnprof.core.measure.bisect_local import LocalBisect

    step = None
    if effect is not None:
        try:
            step = Step(("*",), effect, low if low is not None else effect, high if high is not None else effect)
        except ValueError as exc:
            raise fail(f"--effect/--low/--high: {exc}") from None
    elif low is not None or high is not None:
        raise fail("--low and --high come with --effect")
    job = LocalBisect(
        repo=repo, good=good, bad=bad, suite=suite, out=out, device=device.value, cases=case, cache_dir=cache_dir
    )
    try:
        job.step = step  # its cases: the suite's (or --case's), once the suite is read
        found = job.run(say=lambda line: typer.echo(line, err=True))
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    typer.echo(found.summary())
    raise typer.Exit(0 if found.status() == "confirmed" else 1)


def _paired_with_progress(
    parsed: Suite, suite_path: Path, base: Path, head: Path, options: PairedOptions, quiet: bool
) -> PairedOutcome:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from attnprof.core.measure.paired import profile_paired

    def load_the_comparison() -> None:  # the comparison's imports (SciPy's: a second or more) while the sides start
        import scipy.stats  # noqa: F401

        import attnprof.core.analysis.paired
        import attnprof.core.analysis.render  # noqa: F401

    if quiet:
        return profile_paired(suite_path, parsed, base, head, options, while_starting=load_the_comparison)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=None) as bar:
        task = bar.add_task("starting both sides", total=None)

        def progress(event: str, done: int, total: int, case_id: str) -> None:
            label = "cases, now" if event == "case" else "done"
            bar.update(task, completed=done, total=total, description=f"{label} {case_id}"[:70])

        return profile_paired(suite_path, parsed, base, head, options, progress, load_the_comparison)


def _profile_with_progress(parsed: Suite, options: ProfileOptions, quiet: bool) -> ResultDocument:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from attnprof.core.measure.runner import profile_suite

    if quiet:
        return profile_suite(parsed, options)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=None) as bar:
        task = bar.add_task("measuring peaks", total=None)

        def progress(event: str, done: int, total: int, case_id: str) -> None:
            label = {"case": "profiling", "counters": "ncu counters"}.get(event, "done")
            bar.update(task, completed=done, total=total, description=f"{label} {case_id}"[:70])

        return profile_suite(parsed, options, progress)


def _print_report(doc: ResultDocument, format: Format) -> None:
    from attnprof.core.report import render_markdown, render_table

    if format is Format.json:
        typer.echo(doc.to_json())
    elif format is Format.markdown:
        typer.echo(render_markdown(doc))
    else:
        typer.echo(render_table(doc))


@app.command()
def report(
    result: Annotated[Path, typer.Argument(help="result document (JSON, optionally gzip)")],
    format: Annotated[Format, typer.Option(help="table, markdown or json")] = Format.table,
) -> None:
    """Print the per-kernel table of a result document."""
    try:
        doc = load_result(result)
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    _print_report(doc, format)


@app.command()
def compare(
    results: Annotated[list[Path], typer.Argument(help="BASELINE [BASELINE ...] CANDIDATE: the last is the candidate")],
    json_out: Annotated[bool, typer.Option("--json", help="print the comparison document")] = False,
    config: Annotated[Path | None, typer.Option(help="TOML file of thresholds (same keys as a suite's)")] = None,
    noise_floor: Annotated[
        float | None, typer.Option(help="run-to-run noise of this testbed, relative (default: per mode)")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the resampling")] = 0,
    verdict: Annotated[
        bool,
        typer.Option(
            "--verdict",
            help="insist on a verdict: where every baseline ran on another GPU model, exit 2 instead of printing "
            "the portability report",
        ),
    ] = False,
) -> None:
    """Compare pooled baseline results with a candidate: exit 0 on pass or warn, 1 on fail, 2 on bad input.

    Where every baseline ran on another GPU model there is no verdict: it prints a portability report of the
    latest baseline against the candidate (the time on each, each as a share of that GPU's own peaks) and exits 0,
    or 2 with --verdict."""
    from attnprof.core.analysis import compare as run_compare
    from attnprof.core.analysis import load_config, render_table

    if len(results) < 2:
        raise fail("compare needs at least one baseline and a candidate: BASELINE [BASELINE ...] CANDIDATE")
    try:
        docs = [load_result(p) for p in results]
        models = {d.environment.device.name for d in docs[:-1]}
        gpus = all(d.run.mode == "cuda" for d in docs)  # a CPU run beside a GPU one is bad input (compare says so)
        if gpus and docs[-1].environment.device.name not in models:
            if verdict:
                raise fail(
                    f"no verdict across GPU models: the baseline ran on {', '.join(sorted(models))}, the candidate "
                    f"on {docs[-1].environment.device.name}; compare runs of one model (without --verdict: the "
                    "portability report)"
                )
            from attnprof.core.analysis.portability import portability, render_portability

            typer.echo(render_portability(portability(docs[-2], docs[-1])))
            return
        thresholds = load_config(config) if config else None
        comparison = run_compare(docs[:-1], docs[-1], config=thresholds, noise_floor=noise_floor, seed=seed)
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    if json_out:
        typer.echo(comparison.model_dump_json(by_alias=True, indent=2))
    else:
        typer.echo(render_table(comparison))
    if comparison.verdict == "fail":
        raise typer.Exit(1)


@app.command()
def changepoints(
    results: Annotated[list[Path], typer.Argument(help="result documents in chronological order")],
    metric: Annotated[str, typer.Option(help="latency, bandwidth, throughput or variance")] = "latency",
    case: Annotated[str | None, typer.Option(help="only this case id")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    seed: Annotated[int, typer.Option(help="seed of the permutation test")] = 0,
) -> None:
    """Find change points (e-divisive means with a permutation test) in a series of results."""
    from attnprof.core.analysis import changepoints as find_changepoints
    from attnprof.core.analysis import render_changepoints

    try:
        docs = [load_result(p) for p in results]
        report = find_changepoints(docs, metric=metric, case=case, seed=seed)
    except AttnprofError as exc:
        raise fail(str(exc)) from None
    typer.echo(report.model_dump_json(indent=2) if json_out else render_changepoints(report))


@app.command()
def schema(name: Annotated[SchemaName, typer.Argument(help="result, comparison or paired")]) -> None:
    """Print the JSON Schema of a document."""
    if name is SchemaName.result:
        typer.echo(json.dumps(result_json_schema(), indent=2))
    elif name is SchemaName.paired:
        from attnprof.core.documents.paired import paired_json_schema

        typer.echo(json.dumps(paired_json_schema(), indent=2))
    else:
        from attnprof.core.documents.comparison import comparison_json_schema

        typer.echo(json.dumps(comparison_json_schema(), indent=2))


def main() -> None:
    exit_with(app)


if __name__ == "__main__":
    main()
