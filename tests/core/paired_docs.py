"""Paired comparison documents for the renderers' tests: a base and a head result document and the paired document
of their interleaved rounds, compared by ``compare_paired`` as the analysis does.

Each case's pairs are drawn around a true head/base time ratio with a pair-to-pair spread, and stopped by the same
sequential rule the GPU worker's rounds stop by (``paired_stats.run``), so a case says slower, faster, same or, when
the rounds run out first, max_rounds (ambiguous).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnprof.core.analysis.paired import compare_paired
from attnprof.core.analysis.paired_stats import Rule, log_ratios, run
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.core.documents.paired import Pair, PairedCase, PairedDocument, PairedRule, StoppedBy
from attnprof.core.documents.result import ResultDocument
from tests.core.result_documents import make_case, make_doc

BASE_RUN = "base-0a1b2c3d"
HEAD_RUN = "head-4e5f6a7b"
RULE = Rule(min_effect=0.005, alpha=0.05, min_pairs=4, max_pairs=15, step=2)
_STOPPED: dict[str, StoppedBy] = {"slower": "slower", "faster": "faster", "same": "same", "ambiguous": "max_rounds"}


@dataclass(frozen=True)
class Shape:
    """One case of a paired run: the head's time over the base's (1.03 = the head 3% slower) and the pairs' spread
    (standard deviation of the log ratio)."""

    case: str
    ratio: float
    spread: float = 0.001


SLOWER = Shape("prefill[backend=cudnn,seq_q=2048]", 1.03)
SAME = Shape("prefill[backend=cudnn,seq_q=512]", 1.0, 0.0005)
AMBIGUOUS = Shape("decode[backend=flash,batch=16]", 1.004, 0.012)
FASTER = Shape("prefill[backend=flash,seq_q=2048]", 0.96)


def _pairs(shape: Shape, seed: int, base_us: float) -> tuple[list[Pair], StoppedBy]:
    rng = np.random.default_rng(seed)
    pairs: list[Pair] = []
    for i in range(RULE.max_pairs):
        b = base_us * float(np.exp(0.003 * rng.standard_normal()))
        h = b * shape.ratio * float(np.exp(shape.spread * rng.standard_normal()))
        pairs.append(
            Pair(
                order="AB" if i % 4 in (0, 3) else "BA",
                base_us=b,
                head_us=h,
                base_mhz=1980.0,
                head_mhz=1980.0,
                base_samples=50,
                head_samples=50,
            )
        )
    d = log_ratios([p.base_us for p in pairs], [p.head_us for p in pairs])
    settled = run(d, RULE)
    return pairs[: settled.pairs], _STOPPED[settled.state]


def paired_comparison(shapes: list[Shape] | None = None, *, seed: int = 7) -> ComparisonDocument:
    """The paired comparison of a head against its merge base over ``shapes`` (by default one case each of slower,
    same, ambiguous and faster), as ``compare_paired`` makes it."""
    return compare_paired(*paired_sides(shapes, seed=seed))


def paired_sides(
    shapes: list[Shape] | None = None, *, seed: int = 7
) -> tuple[ResultDocument, ResultDocument, PairedDocument]:
    """The base's and the head's result documents and the paired document of their rounds over ``shapes``."""
    shapes = shapes if shapes is not None else [SLOWER, SAME, AMBIGUOUS, FASTER]
    base_cases, head_cases, rounds = [], [], []
    for i, shape in enumerate(shapes):
        backend = "flash" if "flash" in shape.case else "cudnn"
        base_cases.append(make_case(shape.case, backend=backend, seed=seed * 100 + 2 * i))
        head_cases.append(make_case(shape.case, backend=backend, factor=shape.ratio, seed=seed * 100 + 2 * i + 1))
        pairs, stopped = _pairs(shape, seed * 100 + i, base_cases[-1].latency_us.median)  # type: ignore[union-attr]
        rounds.append(PairedCase(case=shape.case, min_effect=RULE.min_effect, stopped_by=stopped, pairs=pairs))
    base = make_doc(BASE_RUN, base_cases)
    head = make_doc(HEAD_RUN, head_cases, day=1)
    paired = PairedDocument(
        mode="cuda",
        base_run=BASE_RUN,
        head_run=HEAD_RUN,
        rule=PairedRule(
            min_effect=RULE.min_effect,
            alpha=RULE.alpha,
            min_pairs=RULE.min_pairs,
            max_pairs=RULE.max_pairs,
            looks=RULE.looks,
            trim=RULE.trim,
            samples_per_round="as many as a profile run's round takes",
        ),
        cases=rounds,
        wall_s=84.5,
    )
    return base, head, paired
