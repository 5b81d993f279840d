"""bench/paired_budget.py, in small: the recordings it reads, a simulated job through the coordinator's loop, and the
report it writes from them."""

from __future__ import annotations

import argparse

from bench import paired_budget as pb


def test_the_recordings_give_each_cases_spread_and_the_warm_up_it_would_take() -> None:
    rows = {r["case"]: r for r in pb.spreads(pb.recordings())}
    assert set(rows) == {"fused", "decode", "triton"} and all(r["runs"] == 10 for r in rows.values())
    assert 0.006 < rows["decode"]["sd_median"] < 0.01 and rows["triton"]["sd_median"] < rows["decode"]["sd_median"]
    # The H200's cases start steady: two warm-up pairs each.
    assert all(r["warmup_mean"] == 2 and r["warmup_bound"] == 0 for r in rows.values())


def test_a_simulated_job_and_the_report() -> None:
    slow = pb.job(0.055, seed=1, old=False)
    assert slow["decode"]["state"] == "slower" and slow["regressed"] == [True, False]
    assert slow["decode"]["warmup"] >= 2
    out = {
        "spreads": pb.spreads(pb.recordings()),
        "needed": pb.needed((0.008,), (2,), (8, 16), 20),
        "resampled": [],
        "end_to_end": pb.end_to_end((0.055,), 3),
        "set_aside": [],
        "leases": {"profile_s": [9], "ab_s": [13], "fits": {}},
        "cost_lines": ["(costs)"],
        "wall_s": 1.0,
    }
    text = pb.report(out, argparse.Namespace(quick=True, sequences=20, jobs=3))
    assert text.startswith("# Paired runs at the defaults") and "| now | 5.5% | 100.0% |" in text
