"""The suite files the scenarios submit, and the source bundle of the jobs that take one."""

from __future__ import annotations

from functools import cache

from bench import pipeline_load as pipeline


@cache
def bundle() -> bytes:
    """The demo project's package as a job's bundle: the small suite's ``bundled`` case imports it."""
    return pipeline.bundle_bytes(pipeline.BUNDLE_SOURCE, pipeline.BUNDLE_PACKAGE)


def tiny_suite() -> str:
    """The small suite's first case alone, on SDPA's math backend (no bundle needed): the cheapest real job, for
    the scenarios that need many jobs rather than long ones."""
    head, first, *_ = pipeline.SMALL_SUITE.split("\n[[cases]]")
    return head + "\n[[cases]]" + first.replace('backends = ["math", "flash"]', 'backends = ["math"]')


def small_suite(budget_s: float) -> str:
    """The pipeline benchmark's small CPU suite (4 cases, one from the job's bundle) with ``budget_s`` of timing a
    case: long enough to be killed mid-way, short enough for many jobs."""
    return pipeline.SMALL_SUITE.replace("budget_s = 0.1", f"budget_s = {budget_s}").replace(
        "max_samples = 30", "max_samples = 2000"
    )
