"""bench/reliability, without starting anything: the hostile-inputs catalogue and the isolation probes are well
formed, and the committed report is what the report code writes from the committed summary."""

from __future__ import annotations

import json
import string

from bench.reliability import catalogue, probes
from bench.reliability.common import ROOT, SCENARIOS
from bench.reliability.report import load_results, render, summary

REPORT = ROOT / "bench" / "reports" / "reliability.md"
SUMMARY = ROOT / "bench" / "reports" / "data" / "reliability-2026-12-01" / "summary.json"


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_hostile_input_names_its_refusal_and_its_field() -> None:
    cases = catalogue.CASES
    assert len(cases) == 70
    names = [case.name for case in cases]
    assert len(set(names)) == len(names), "case names must be unique: they are the report's rows"
    for case in cases:
        assert case.statuses and all(400 <= s < 500 for s in case.statuses), case.name
        assert case.words and all(w.strip() for w in case.words), case.name
        assert case.group and isinstance(case.request, catalogue.Job | catalogue.Call | catalogue.Stream)


def test_the_catalogue_names_only_what_the_scenario_gives() -> None:
    for case in catalogue.CASES:
        request = case.request
        if isinstance(request, catalogue.Call):
            assert request.token is None or request.token in catalogue.TOKEN_NAMES, case.name
        if not isinstance(request, catalogue.Job):
            assert _fields(request.path) <= set(catalogue.PATH_NAMES), case.name


def test_the_probes_are_made_from_their_table() -> None:
    names = {name: f"<{name}>" for name in probes.NAMES}
    tokens = {name: f"secret-{name}" for name in probes.TOKEN_NAMES}
    made = probes.probes(names, tokens)
    assert len(made) == 147
    assert len({(p.what, p.method, p.path) for p in made}) == len(made)
    kinds = {p.kind: sum(q.kind == p.kind for q in made) for p in made}
    assert kinds == {
        "cross-project": 78,
        "cross-reference": 16,
        "role": 27,
        "worker": 15,
        "job-token": 8,
        "no-token": 3,
    }
    assert all("{" not in p.path and "}" not in p.path for p in made)
    # A probe that names one of b's objects has a twin naming one that does not exist.
    assert all(p.twin is not None and p.twin != (p.path, p.body) for p in made if p.kind.startswith("cross-"))
    assert {p.token for p in made} == {*tokens.values(), None}


def test_the_report_is_written_again_from_its_committed_summary() -> None:
    data = load_results(SUMMARY)
    assert list(data) == list(SCENARIOS)
    assert render(data, "reliability.png") == REPORT.read_text()
    # The summary a report writes from it is the summary itself.
    assert json.dumps(summary(data), indent=1, default=str) + "\n" == SUMMARY.read_text()
