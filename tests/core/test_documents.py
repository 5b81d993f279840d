"""Result documents on disk: reading them, refusing bad ones with a message that names the problem,
writing them, and their JSON Schema against the real documents committed from H200 runs."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from attnprof.core.documents import (
    MAX_PARAMS_DEPTH,
    RESULT_SCHEMA,
    ResultDocument,
    load_result,
    parse_result,
    result_json_schema,
    write_result,
)
from attnprof.core.errors import AttnprofError, DocumentError
from tests.profiling_support import DATA

GPU_RESULTS = sorted((DATA / "h200" / "attnprof").glob("result*.json"))
H200_RESULT = DATA / "h200" / "attnprof" / "result.json"


def raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(H200_RESULT.read_text())
    return data


def test_the_json_schema_is_valid_draft_2020_12() -> None:
    schema = result_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(RESULT_SCHEMA)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"]["const"] == RESULT_SCHEMA
    assert set(schema["required"]) >= {"run", "suite", "environment", "cases"}


@pytest.mark.parametrize("path", GPU_RESULTS, ids=lambda p: p.name)
def test_committed_gpu_results_validate_against_the_schema(path: Path) -> None:
    data = json.loads(path.read_text())
    jsonschema.Draft202012Validator(result_json_schema()).validate(data)
    doc = load_result(path)
    assert doc.run.mode == "cuda" and doc.cases


def test_the_schema_rejects_what_the_models_reject() -> None:
    validator = jsonschema.Draft202012Validator(result_json_schema())
    bad_phase = raw()
    bad_phase["cases"][0]["kernels"][0]["phase"] = "attention"
    negative = raw()
    negative["cases"][0]["latency_us"]["median"] = -1.0
    share = raw()
    share["cases"][0]["kernels"][0]["share"] = 1.5
    extra = raw()
    extra["cases"][0]["latency_ms"] = 1.0
    for data in (bad_phase, negative, share, extra):
        assert not validator.is_valid(data)
        with pytest.raises(DocumentError):
            parse_result(data)


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    doc = load_result(H200_RESULT)
    path = tmp_path / "copy.json"
    write_result(doc, path)
    again = load_result(path)
    assert again == doc
    assert json.loads(path.read_text()) == json.loads(doc.to_json())
    assert path.read_text().endswith("}\n")


def test_gzip_documents_are_read(tmp_path: Path) -> None:
    path = tmp_path / "result.json.gz"
    path.write_bytes(gzip.compress(H200_RESULT.read_bytes()))
    assert load_result(path) == load_result(H200_RESULT)


def test_an_unreadable_path(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="cannot read") as info:
        load_result(tmp_path / "missing.json")
    assert "missing.json" in str(info.value) and isinstance(info.value, AttnprofError)
    with pytest.raises(DocumentError, match="cannot read"):
        load_result(tmp_path)  # a directory


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not JSON"),
        (b"{ not json", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"\x1f\x8bgarbage after the gzip magic", "not a valid gzip file"),
        (gzip.compress(b'{"schema": "attnprof.result/v1"}')[:20], "not a valid gzip file"),
        (gzip.compress(b'{"schema": "attnprof.result/v1"}')[:-8] + b"\0" * 8, "not a valid gzip file"),
        (
            (lambda z: z[:12] + bytes(b ^ 0xFF for b in z[12:-8]) + z[-8:])(gzip.compress(b'{"a": [1, 2, 3]}' * 8)),
            "not a valid gzip file",
        ),
        (b"[1, 2]", "a result document is a JSON object, got list"),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "JSON nested too deeply"),
    ],
    ids=[
        "empty",
        "not-json",
        "binary",
        "gzip-magic-only",
        "gzip-truncated",
        "gzip-bad-crc",
        "gzip-corrupt",
        "list",
        "deeply-nested",
    ],
)
def test_a_file_that_is_not_a_document(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(DocumentError, match=message) as info:
        load_result(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("schema", [None, "attnprof.result/v0", "attnprof.comparison/v1"])
def test_a_wrong_schema_string(schema: str | None) -> None:
    data = raw()
    if schema is None:
        del data["schema"]
    else:
        data["schema"] = schema
    with pytest.raises(DocumentError) as info:
        parse_result(data, source="upload.json")
    assert str(info.value) == f"upload.json: schema is {schema!r}, expected 'attnprof.result/v1'"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("cases", 2, "kernels", 0, "phase"), "warp", "cases.2.kernels.0.phase"),
        (("cases", 0, "latency_us", "median"), -3.0, "cases.0.latency_us.median"),
        (("run", "mode"), "rocm", "run.mode"),
        (("environment", "peaks", "dram_gbps", "source"), "guessed", "environment.peaks.dram_gbps.source"),
        (("cases", 1, "status"), "crashed", "cases.1.status"),
    ],
)
def test_an_invalid_field_is_named(path: tuple[str | int, ...], value: Any, field: str) -> None:
    data = raw()
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(DocumentError) as info:
        parse_result(data, source="run.json")
    text = str(info.value)
    assert text.startswith("run.json: invalid result document: ") and f"{field}: " in text


def test_a_missing_field_is_named() -> None:
    data = raw()
    del data["environment"]["testbed_key"]
    with pytest.raises(DocumentError, match=r"environment\.testbed_key: Field required"):
        parse_result(data)


def test_many_errors_are_summarised() -> None:
    data = raw()
    for case in data["cases"]:
        case["status"] = "crashed"
    with pytest.raises(DocumentError, match=r"; and 10 more$"):
        parse_result(data)


def test_a_document_is_a_model_not_just_json() -> None:
    doc = load_result(H200_RESULT)
    assert isinstance(doc, ResultDocument)
    assert doc.case("sdpa[backend=cudnn,pass=fwd]") is doc.cases[0]
    assert doc.case("nope") is None
    assert json.loads(doc.to_json())["schema"] == RESULT_SCHEMA


NON_FINITE_FIELDS = [
    ("cases", 0, "latency_us", "median"),
    ("cases", 0, "latency_us", "samples", 3),
    ("cases", 0, "kernels", 0, "duration_us", "p25"),
    ("cases", 0, "kernels", 0, "counters"),
    ("suite", "thresholds", "latency"),
    ("environment", "peaks", "dram_gbps", "value"),
    ("environment", "health_start", "power_w"),
]


def _set(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> str:
    """Put ``value`` at ``path`` (a counters table gets it under "x"); returns the field as errors name it."""
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    if path[-1] == "counters":
        node["counters"] = {"x": value}
        path = (*path, "x")
    else:
        node[path[-1]] = value
    return ".".join(str(p) for p in path)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e309", "-1e309"])
@pytest.mark.parametrize("path", NON_FINITE_FIELDS, ids=lambda p: ".".join(map(str, p)))
def test_non_finite_numbers_are_refused_naming_the_field(
    tmp_path: Path, path: tuple[str | int, ...], literal: str
) -> None:
    data = raw()
    data["environment"]["health_start"] = data["environment"]["health_start"] or {}
    field = _set(data, path, "__here__")
    # As a file holds it: Python's json reads these literals (and 1e309 as infinity); JSON has none of them.
    doc = tmp_path / "r.json"
    doc.write_text(json.dumps(data).replace('"__here__"', literal))
    with pytest.raises(DocumentError) as info:
        load_result(doc)
    assert f"{field}: Input should be a finite number" in str(info.value)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_numbers_in_params_are_refused_with_their_path(value: float) -> None:
    data = raw()
    data["cases"][1]["params"]["args"] = {"block": [64, {"scale": value}]}
    with pytest.raises(DocumentError) as info:
        parse_result(data)
    assert f"cases.1.params: Input should be a finite number at args.block.1.scale, got {value}" in str(info.value)


def test_params_nest_at_most_the_limit() -> None:
    deep: Any = 1
    for _ in range(MAX_PARAMS_DEPTH - 1):
        deep = [deep]
    data = raw()
    data["cases"][0]["params"]["deep"] = deep  # deep, then MAX_PARAMS_DEPTH - 1 indices: at the limit
    assert parse_result(data).cases[0].params["deep"] == deep
    data["cases"][0]["params"]["deep"] = [deep]
    with pytest.raises(DocumentError, match=rf"cases\.0\.params: Input should nest at most {MAX_PARAMS_DEPTH} levels"):
        parse_result(data)
    # Far deeper than Python's recursion limit: still a DocumentError, found without recursing.
    for _ in range(5000):
        deep = [deep]
    data["cases"][0]["params"]["deep"] = deep
    with pytest.raises(DocumentError, match="levels deep"):
        parse_result(data)


def test_the_schema_says_numbers_are_finite() -> None:
    schema = result_json_schema()
    assert "finite" in schema["$comment"]
    median = schema["$defs"]["LatencyStats"]["properties"]["median"]
    assert median["minimum"] == 0 and median["maximum"] == sys.float_info.max
    validator = jsonschema.Draft202012Validator(schema)
    for value in (float("inf"), float("-inf"), json.loads("1e309")):
        data = raw()
        _set(data, ("cases", 0, "kernels", 0, "counters"), value)
        assert not validator.is_valid(data)
        data = raw()
        data["cases"][0]["latency_us"]["median"] = value
        assert not validator.is_valid(data)


def test_round_samples_must_cover_the_samples_one_count_per_round() -> None:
    data = raw()
    latency = next(c["latency_us"] for c in data["cases"] if c.get("latency_us"))
    n = len(latency["samples"])
    latency["rounds"] = 2
    latency["round_samples"] = [n - 3, 3]
    parsed = parse_result(data)
    assert next(c for c in parsed.cases if c.latency_us).latency_us.round_samples == [n - 3, 3]  # type: ignore[union-attr]
    latency["round_samples"] = [n - 3, 2]
    with pytest.raises(DocumentError, match=rf"round_samples sums to {n - 1} but there are {n} samples"):
        parse_result(data)
    latency["round_samples"] = [n - 4, 2, 2]
    with pytest.raises(DocumentError, match="round_samples has 3 rounds but rounds is 2"):
        parse_result(data)
    latency["round_samples"] = [n, 0]
    with pytest.raises(DocumentError, match="round_samples"):
        parse_result(data)
