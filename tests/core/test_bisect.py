"""The bisection's logic with probes answered by a model of a history (one commit holds a step, two share it, a
commit does not build, none does): which pairs it probes, how many, and what it concludes."""

from __future__ import annotations

import math

import pytest

from attnprof.core.bisect import Bisection, Probe, Step

STEP = Step(("decode",), 2.0, 1.8, 2.2)  # a 3x slowdown: +200% [+180%, +220%]


def history(n: int) -> list[str]:
    return [f"c{i:02d}" for i in range(n + 1)]  # c00 good, then n commits, the last bad


def run(
    commits: list[str],
    effect_of: dict[str, float],
    broken: set[str] = frozenset(),
    step: Step = STEP,  # type: ignore[assignment]
) -> tuple[Bisection, list[tuple[str, str]]]:
    """Bisect with each commit's own share of the slowdown in ``effect_of``; a probe's effect is the sum between."""
    bisection = Bisection(commits, step)
    pairs = []
    while (pair := bisection.next_pair()) is not None:
        assert pair not in pairs, f"probed {pair} twice"
        pairs.append(pair)
        good, candidate = pair
        if candidate in broken:
            bisection.record(good, candidate, Probe("", "", "skip", detail="does not build"))
            continue
        lo, hi = commits.index(good), commits.index(candidate)
        effect = sum(effect_of.get(c, 0.0) for c in commits[lo + 1 : hi + 1])
        outcome = "bad" if effect >= step.share * step.effect else "good"
        bisection.record(good, candidate, Probe("", "", outcome, effect, effect - 0.1, effect + 0.1))
    return bisection, pairs


@pytest.mark.parametrize("culprit", range(1, 17))
def test_one_commit_of_sixteen_is_found_and_confirmed_in_at_most_five_probes(culprit: int) -> None:
    commits = history(16)
    bisection, pairs = run(commits, {commits[culprit]: 2.0})
    assert bisection.status() == "confirmed" and bisection.culprit == commits[culprit]
    assert len(pairs) <= math.ceil(math.log2(16)) + 1 == bisection.budget == 5
    assert bisection.confirmation is not None and bisection.confirmation.good == commits[culprit - 1]
    assert "made the step: +200.0% against its parent" in bisection.summary()


def test_a_commit_that_does_not_build_is_skipped_and_named_where_it_hides_the_culprit() -> None:
    commits = history(8)
    # away from the culprit: skipped, and the culprit still confirmed against its parent
    bisection, _ = run(commits, {commits[5]: 2.0}, broken={commits[2]})
    assert bisection.status() == "confirmed" and bisection.culprit == commits[5]
    elsewhere, _ = run(commits, {commits[6]: 2.0}, broken={commits[4]})
    assert elsewhere.status() == "confirmed" and any(p.outcome == "skip" for p in elsewhere.probes)
    # the culprit's parent does not build: as git bisect skip says, it is one of the two
    hidden, _ = run(commits, {commits[5]: 2.0}, broken={commits[4]})
    assert hidden.status() == "skipped" and hidden.ambiguous() == [commits[4], commits[5]]
    assert hidden.summary().startswith(f"one of {commits[4]}, {commits[5]}")


def test_a_step_shared_by_two_commits_is_spread_with_each_share() -> None:
    commits = history(8)
    bisection, _ = run(commits, {commits[3]: 1.0, commits[6]: 1.0})
    assert bisection.status() == "spread"
    assert "spread over several commits" in bisection.summary()
    assert bisection.shares() and all(0 < share <= 1.0 for _, share in bisection.shares())


def test_a_step_no_commit_reproduces_is_not_reproduced() -> None:
    bisection, pairs = run(history(8), {})
    assert bisection.status() == "not_reproduced" and len(pairs) <= bisection.budget
    assert bisection.summary().startswith("not reproduced")


def test_the_smallest_range_is_one_probe() -> None:
    bisection, pairs = run(history(1), {"c01": 2.0})
    assert pairs == [("c00", "c01")] and bisection.status() == "confirmed"


def test_bad_ranges_and_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="at least a good and a bad"):
        Bisection(["c00"], STEP)
    with pytest.raises(ValueError, match="each once"):
        Bisection(["c00", "c00"], STEP)
    with pytest.raises(ValueError, match="slowdown"):
        Step(("decode",), -0.1, -0.2, 0.0)
    with pytest.raises(ValueError, match="at least one case"):
        Step((), 0.1, 0.05, 0.15)
