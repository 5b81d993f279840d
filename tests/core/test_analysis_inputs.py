"""Every bad input: unreadable files, wrong schemas, no common cases, bad --config files, bad arguments."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from attnprof.core.analysis import AnalysisError, changepoints, compare, e_divisive, load_config, parse_config
from attnprof.core.documents import Thresholds, load_result
from attnprof.core.errors import DocumentError
from tests.core.result_documents import make_case, make_doc, runs


def test_unreadable_result_file(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="cannot read"):
        load_result(tmp_path / "missing.json")


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text("{not json")
    with pytest.raises(DocumentError, match="not JSON"):
        load_result(p)


def test_wrong_schema(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    data = json.loads(runs(1)[0].to_json())
    data["schema"] = "attnprof.comparison/v1"
    p.write_text(json.dumps(data))
    with pytest.raises(DocumentError, match=r"expected 'attnprof\.result/v1'"):
        load_result(p)


def test_gzip_result_loads(tmp_path: Path) -> None:
    p = tmp_path / "r.json.gz"
    p.write_bytes(gzip.compress(runs(1)[0].to_json().encode()))
    assert load_result(p).run.id == "base-0-0"


def test_no_common_cases_names_both_sides() -> None:
    cand = make_doc("cand", [make_case("decode[backend=flash]")])
    with pytest.raises(AnalysisError, match=r"no common cases.*prefill\[backend=cudnn\].*decode\[backend=flash\]"):
        compare(runs(2), cand)


def test_analysis_error_is_a_document_error() -> None:
    assert issubclass(AnalysisError, DocumentError)


def test_candidate_without_cases() -> None:
    with pytest.raises(AnalysisError, match="no cases"):
        compare(runs(1), make_doc("empty", []))


@pytest.mark.parametrize("floor", [-0.1, 1.0, 3.0])
def test_bad_noise_floor(floor: float) -> None:
    with pytest.raises(AnalysisError, match="noise floor"):
        compare(runs(1), runs(1, seed=2)[0], noise_floor=floor)


def test_config_top_level_keys(tmp_path: Path) -> None:
    p = tmp_path / "gate.toml"
    p.write_text("latency = 0.05\nfdr = 0.05\n")
    assert load_config(p) == Thresholds(latency=0.05, fdr=0.05)


def test_config_thresholds_table(tmp_path: Path) -> None:
    p = tmp_path / "gate.toml"
    p.write_text("[thresholds]\nvariance = 1.0\nbandwidth = 0.03\n")
    assert load_config(p) == Thresholds(variance=1.0, bandwidth=0.03)


def test_config_suite_thresholds_table(tmp_path: Path) -> None:
    p = tmp_path / "gate.toml"
    p.write_text("[suite.thresholds]\nthroughput = 0.04\n")
    assert load_config(p) == Thresholds(throughput=0.04)


def test_config_unreadable(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")


def test_config_not_toml(tmp_path: Path) -> None:
    p = tmp_path / "gate.toml"
    p.write_text("latency = = 2\n")
    with pytest.raises(DocumentError, match="not valid TOML"):
        load_config(p)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("latncy = 0.02\n", r"latncy: unknown key; allowed keys: latency"),
        ("[thresholds]\nlatency = 0.02\nspeed = 1\n", r"thresholds\.speed: unknown key"),
        ("[thresholds]\nlatency = 0.02\n[other]\nx = 1\n", r"other: unknown key beside \[thresholds\]"),
        ("latency = '2%'\n", r"latency: expected a number, got '2%'"),
        ("latency = true\n", r"latency: expected a number"),
        ("latency = -0.02\n", r"latency: .*greater than or equal to 0"),
        ("fdr = 1.5\n", r"fdr: .*less than 1"),
        ("[thresholds]\nfdr = 0\n", r"thresholds\.fdr: .*greater than 0"),
        ("thresholds = 3\n", r"thresholds: expected a table"),
        ("[suite]\nname = 'x'\n", r"suite: only suite.thresholds"),
    ],
)
def test_config_bad_keys_and_values(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "gate.toml"
    p.write_text(text)
    with pytest.raises(DocumentError, match=match):
        load_config(p)


def test_parse_config_names_its_source() -> None:
    with pytest.raises(DocumentError, match=r"^cli: bogus: unknown key"):
        parse_config({"bogus": 1}, source="cli")


def test_changepoints_bad_input() -> None:
    docs = runs(3)
    with pytest.raises(AnalysisError, match="unknown metric 'speed'"):
        changepoints(docs, metric="speed")
    with pytest.raises(AnalysisError, match="no result documents"):
        changepoints([])
    with pytest.raises(AnalysisError, match="case 'nope' is in none of the 3 documents"):
        changepoints(docs, case="nope")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"permutations": 0}, "permutations"),
        ({"min_size": 1}, "min_size"),
    ],
)
def test_e_divisive_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(AnalysisError, match=match):
        e_divisive([1.0, 2.0, 3.0], **kwargs)  # type: ignore[arg-type]


def test_e_divisive_rejects_nan_and_matrices() -> None:
    with pytest.raises(AnalysisError, match="not finite"):
        e_divisive([1.0, float("nan"), 2.0])
    with pytest.raises(AnalysisError, match="one-dimensional"):
        e_divisive([[1.0, 2.0]])  # type: ignore[list-item]
