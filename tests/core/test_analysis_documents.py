"""The comparison document and its schema, the text table, and every committed result document."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from attnprof.core.analysis import changepoints, compare, render_table
from attnprof.core.documents import load_result
from attnprof.core.documents.comparison import COMPARISON_SCHEMA, ComparisonDocument, comparison_json_schema
from tests.core.result_documents import DATA_DIRS, real_documents, runs, scaled

RESULTS = DATA_DIRS[0]


def test_comparison_schema_validates_a_document() -> None:
    schema = comparison_json_schema()
    assert schema["$id"].endswith(COMPARISON_SCHEMA)
    jsonschema.Draft202012Validator.check_schema(schema)
    c = compare(runs(3, seed=1), runs(1, seed=2, factor=1.05, prefix="cand")[0])
    jsonschema.validate(json.loads(c.to_json()), schema)
    jsonschema.validate(json.loads(compare([], runs(1)[0]).to_json()), schema)
    # The settings' model is named for what it is (the service has its own ``Settings``); the key stays ``settings``.
    assert schema["properties"]["settings"] == {"$ref": "#/$defs/ComparisonSettings"}
    assert "Settings" not in schema["$defs"] and "settings" in json.loads(c.to_json())


def test_document_carries_the_settings_used() -> None:
    c = compare(runs(2), runs(1, seed=3)[0], seed=5)
    s = c.settings
    assert s.mode == "cuda" and s.seed == 5 and s.noise_floor == 0.015 and s.noise_floor_source == "default"
    assert set(s.thresholds) >= {"latency", "bandwidth", "throughput", "variance", "dram_bytes", "fdr"}
    assert "case.thresholds" in s.precedence
    assert c.summary.cases == 1 and c.summary.compared == 1


def test_table_is_plain_ascii_and_regressions_come_first() -> None:
    base = runs(3, seed=1, backends=("cudnn", "flash", "efficient"))
    cand = runs(1, seed=2, prefix="cand", backends=("cudnn", "flash", "efficient"))[0]
    cand.cases[2] = scaled(cand, 1.08).cases[2]
    cand.cases[0] = scaled(cand, 0.9).cases[0]
    text = render_table(compare(base, cand))
    assert text.isascii()
    lines = text.splitlines()
    assert lines[0] == "verdict: FAIL"
    rows = [ln for ln in lines if ln.startswith("prefill[")]
    assert "REGRESSED" in rows[0] and "efficient" in rows[0]
    assert "IMPROVED" in rows[-1] and "cudnn" in rows[-1]
    assert "kernel fmha_cutlassF_bf16_aligned_64x128_rf_sm80 (fused_attention)" in text
    assert "95% CI" in text and "+8." in text


def test_synthetic_fixture_set() -> None:
    base = [load_result(RESULTS / f"synthetic-h200-baseline-{i}.json") for i in range(3)]
    same = load_result(RESULTS / "synthetic-h200-candidate-same.json")
    slow = load_result(RESULTS / "synthetic-h200-candidate-5pct-slower.json")
    assert compare(base, same).verdict == "pass"
    c = compare(base, slow)
    assert c.verdict == "fail" and c.summary.regressed == 3


@pytest.mark.parametrize("path", real_documents(), ids=lambda p: Path(p).name)
def test_every_committed_result_document(path: Path) -> None:
    doc = load_result(path)
    c = compare([doc], doc)
    assert c.verdict == "pass", render_table(c)
    ComparisonDocument.model_validate_json(c.to_json())
    timed = [x for x in doc.cases if x.status == "ok" and x.latency_us and len(x.latency_us.samples) >= 5]
    if not timed:
        return
    slow = compare([doc], scaled(doc, 1.3))
    assert slow.verdict == ("warn" if doc.run.suspect else "fail"), render_table(slow)
    a = compare([doc], scaled(doc, 1.01))
    b = compare([scaled(doc, 1000.0)], scaled(doc, 1010.0))
    assert sorted((f.case, f.metric, f.status) for f in a.findings) == sorted(
        (f.case, f.metric, f.status) for f in b.findings
    )
    history = [doc] * 12 + [scaled(doc, 1.5)] * 12
    report = changepoints(history, case=timed[0].id)
    assert [p.index for p in report.cases[0].points] == [12]
