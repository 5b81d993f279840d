"""What the benchmarks' ``--quick`` modes share: a smoke run writes into a folder of its own, never over a report or
data that ``bench/reports`` commits."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

REPORTS = Path(__file__).resolve().parent / "reports"


def scratch(name: str) -> Path:
    """A new folder under the system's temporary folder for a quick run's outputs, printed so it can be found."""
    folder = Path(tempfile.mkdtemp(prefix=f"attnprof-{name}-quick-"))
    print(f"quick run: outputs in {folder}/", flush=True)
    return folder


def place(parser: argparse.ArgumentParser, name: str, *outputs: tuple[Path | None, str]) -> list[Path]:
    """Where a quick run writes each of its ``outputs``, given as (the path the user named or None, a file name): a
    named path as named (refused, as a usage error, under ``bench/reports``), the others in one new scratch folder
    of ``name``'s."""
    refuse_reports(parser, *(given for given, _ in outputs))
    folder: Path | None = None
    placed = []
    for given, file in outputs:
        if given is None:
            folder = folder or scratch(name)
            given = folder / file
        placed.append(given)
    return placed


def refuse_reports(parser: argparse.ArgumentParser, *paths: Path | None) -> None:
    """Stop (as a usage error) where a quick run was pointed into ``bench/reports``."""
    for path in paths:
        if path is not None and path.resolve().is_relative_to(REPORTS):
            parser.error(f"--quick writes nothing under bench/reports ({path}): name a path elsewhere or leave it out")
