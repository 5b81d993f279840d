"""The builders of ``tests.core.result_documents`` make valid result documents, and ``scaled`` scales every time."""

from __future__ import annotations

import json

from attnprof.core.documents import parse_result
from tests.core.result_documents import grid, make_case, make_doc, runs, scaled


def test_built_documents_are_valid_result_documents() -> None:
    for doc in [
        *runs(2, backends=("cudnn", "math")),
        grid(6),
        make_doc("cpu", [make_case(status="failed")], mode="cpu"),
    ]:
        again = parse_result(json.loads(doc.to_json()))
        assert again == doc


def test_scaled_scales_every_time() -> None:
    doc = runs(1)[0]
    twice = scaled(doc, 2.0)
    a, b = doc.cases[0], twice.cases[0]
    assert a.latency_us and b.latency_us
    assert b.latency_us.median == 2 * a.latency_us.median
    assert b.kernels[0].duration_us.median == 2 * a.kernels[0].duration_us.median
