"""A paired comparison of pairs some of which were set aside as disturbed: the test uses the others, the finding, the
notes and the stopping words say how many were set aside, and documents written before set-asides still load."""

from __future__ import annotations

import json

import jsonschema

from attnprof.core.analysis.paired import compare_paired
from attnprof.core.analysis.render import render_table, stopping
from attnprof.core.documents.paired import PairedDocument, paired_json_schema
from attnprof.core.documents.result import ResultDocument
from tests.core.paired_docs import SLOWER, paired_sides

REASON = "disturbed: the base's round stalled"


def _with_a_stalled_pair(flagged: bool) -> tuple[ResultDocument, ResultDocument, PairedDocument]:
    """The slower case of ``paired_docs`` with one more pair after its first, whose base round took 7x its time."""
    base, head, paired = paired_sides([SLOWER])
    (case,) = paired.cases
    first = case.pairs[0]
    stalled = first.model_copy(update={"base_us": first.base_us * 7, "disturbed": REASON if flagged else None})
    case.pairs.insert(1, stalled)
    paired.rule.max_set_aside = 3
    return base, head, paired


def test_the_test_leaves_out_the_pairs_set_aside_and_says_so() -> None:
    clean = compare_paired(*paired_sides([SLOWER]))
    base, head, paired = _with_a_stalled_pair(flagged=True)
    doc = compare_paired(base, head, paired)
    (before,) = [f for f in clean.findings if f.rounds is not None]
    (after,) = [f for f in doc.findings if f.rounds is not None]
    # The same test on the same pairs as without the stalled one: it is in the document, not in the statistic.
    assert (after.rounds, after.change, after.ci, after.p) == (before.rounds, before.change, before.ci, before.p)
    assert after.set_aside == 1 and before.set_aside is None
    assert after.status == "regressed" and after.baseline == before.baseline and after.candidate == before.candidate
    assert "1 more pair(s) set aside as disturbed and run again" in (after.detail or "")
    assert stopping(after) == f"slower after {after.rounds} pairs (1 more set aside as disturbed)"
    assert f"paired: slower after {after.rounds} pairs (1 more set aside as disturbed)" in render_table(doc)
    assert any(n.startswith("1 pair(s) of rounds set aside as disturbed") for n in doc.notes)
    assert doc.paired is not None and doc.paired.rounds == after.rounds + 1  # every pair run, set aside or not


def test_a_stalled_pair_left_in_the_test_widens_it() -> None:
    """What setting aside is for: the same pairs with the stalled one counted give a far wider interval."""
    kept = compare_paired(*_with_a_stalled_pair(flagged=True))
    counted = compare_paired(*_with_a_stalled_pair(flagged=False))
    (k,) = [f for f in kept.findings if f.rounds is not None]
    (c,) = [f for f in counted.findings if f.rounds is not None]
    assert c.rounds == k.rounds + 1 and c.set_aside is None
    assert k.ci is not None and c.ci is not None
    assert c.ci.high - c.ci.low > 10 * (k.ci.high - k.ci.low)


def test_a_paired_document_without_set_asides_loads_and_every_pair_counts() -> None:
    _, _, paired = _with_a_stalled_pair(flagged=False)
    raw = json.loads(paired.to_json())
    del raw["rule"]["max_set_aside"]
    for case in raw["cases"]:
        for pair in case["pairs"]:
            del pair["disturbed"]
    old = PairedDocument.model_validate(raw)
    assert old.rule.max_set_aside == 0
    assert old.cases[0].counted == old.cases[0].pairs


def test_the_schema_describes_set_asides_and_holds_a_document_with_one() -> None:
    _, _, paired = _with_a_stalled_pair(flagged=True)
    schema = paired_json_schema()
    jsonschema.Draft202012Validator(schema).validate(json.loads(paired.to_json()))
    defs = schema["$defs"]
    assert "disturbed" in defs["Pair"]["properties"] and "disturbed" not in defs["Pair"].get("required", [])
    assert "max_set_aside" in defs["PairedRule"]["properties"]
    assert "max_set_aside" not in defs["PairedRule"].get("required", [])
