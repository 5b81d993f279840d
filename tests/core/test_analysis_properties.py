"""Property tests of the comparison and the change-point search (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnprof.core.analysis import compare, e_divisive
from attnprof.core.documents import ResultDocument
from tests.core.result_documents import make_case, make_doc, scaled

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def gpu_runs(draw: st.DrawFn) -> tuple[list[ResultDocument], dict]:
    """1-3 baseline runs of 1-3 cases with GPU-like noise, and the parameters to draw a candidate."""
    k = draw(st.integers(1, 3))
    n_cases = draw(st.integers(1, 3))
    params = {
        "median_us": draw(st.floats(20.0, 5000.0)),
        "cv": draw(st.floats(0.001, 0.02)),
        "n": draw(st.integers(10, 150)),
        "run_sd": draw(st.floats(0.0, 0.006)),
        "bound": draw(st.sampled_from(["latency", "memory", "compute", None])),
        "seed": draw(st.integers(0, 2**20)),
        "n_cases": n_cases,
    }
    return [_run(params, r, 1.0) for r in range(k)], params


def _run(params: dict, r: int, factor: float) -> ResultDocument:
    rng = np.random.default_rng(params["seed"] + 7919 * r)
    offset = float(np.exp(params["run_sd"] * rng.standard_normal()))
    cases = [
        make_case(
            f"case[i={i}]",
            median_us=params["median_us"] * (1 + i),
            cv=params["cv"],
            n=params["n"],
            factor=factor * offset,
            seed=int(rng.integers(2**30)),
            bound=params["bound"],
        )
        for i in range(params["n_cases"])
    ]
    return make_doc(f"run-{r}-{factor:g}", cases, day=r)


@FAST
@given(gpu_runs(), st.integers(0, 2))
def test_identical_inputs_never_fail(drawn: tuple[list[ResultDocument], dict], which: int) -> None:
    base, _ = drawn
    cand = base[which % len(base)]
    c = compare(base, cand)
    assert c.verdict != "fail"
    assert compare([cand], cand).verdict == "pass"


@FAST
@given(gpu_runs())
def test_a_30_percent_slowdown_always_fails(drawn: tuple[list[ResultDocument], dict]) -> None:
    base, params = drawn
    cand = _run(params, 99, 1.30)
    c = compare(base, cand)
    assert c.verdict == "fail"
    timing = [f for f in c.findings if f.metric in ("latency", "bandwidth", "throughput")]
    assert timing and all(f.status == "regressed" for f in timing)


@FAST
@given(gpu_runs(), st.floats(1e-3, 1e3), st.floats(0.95, 1.15))
def test_scaling_every_time_keeps_the_verdict(
    drawn: tuple[list[ResultDocument], dict], scale: float, factor: float
) -> None:
    base, params = drawn
    cand = _run(params, 99, factor)
    a = compare(base, cand)
    b = compare([scaled(d, scale) for d in base], scaled(cand, scale))
    assert a.verdict == b.verdict
    assert sorted((f.case, f.metric, f.status) for f in a.findings) == sorted(
        (f.case, f.metric, f.status) for f in b.findings
    )


@FAST
@given(gpu_runs(), st.floats(0.9, 1.1), st.integers(0, 2**31 - 1))
def test_deterministic_for_a_seed(drawn: tuple[list[ResultDocument], dict], factor: float, seed: int) -> None:
    base, params = drawn
    cand = _run(params, 99, factor)
    assert compare(base, cand, seed=seed).to_json() == compare(base, cand, seed=seed).to_json()


@FAST
@given(
    st.lists(st.floats(50.0, 150.0), min_size=2, max_size=60),
    st.integers(0, 1000),
    st.floats(1e-3, 1e3),
)
def test_change_points_are_deterministic_and_scale_free(values: list[float], seed: int, scale: float) -> None:
    a = e_divisive(values, seed=seed, permutations=39, alpha=0.05)
    b = e_divisive(values, seed=seed, permutations=39, alpha=0.05)
    assert a == b
    c = e_divisive([v * scale for v in values], seed=seed, permutations=39, alpha=0.05)
    assert [p.index for p in a] == [p.index for p in c]
    assert all(5 <= p.index <= len(values) - 5 for p in a)
