"""Advice with its counterfactual timed here: each rule's change to an SDPA call, timed against the call as it is on
the CPU (real torch), kept as advice only where it is faster; rules switched off in the suite are not tried."""

from __future__ import annotations

from typing import Any

import pytest

from attnprof.core.documents import Advice, SdpaCall, SdpaTensor
from attnprof.core.documents.result import ADVICE_RULES
from attnprof.core.errors import SuiteError
from attnprof.core.measure.advice import ADVICE_MIN_GAIN, advise
from attnprof.core.report import advice_lines
from attnprof.core.suite import parse_suite
from tests.core.result_documents import make_case


def _t(shape: list[int], strides: list[int] | None = None, dtype: str = "float") -> SdpaTensor:
    return SdpaTensor(shape=shape, strides=strides, dtype=dtype)


def test_the_backend_rule_times_the_fused_path_against_a_forced_math_one() -> None:
    # The suite forced math: on the CPU PyTorch's fused path takes the same call well over 5% faster
    call = SdpaCall(query=_t([1, 8, 512, 64]), key=_t([1, 8, 512, 64]), value=_t([1, 8, 512, 64]))
    advice = advise([call], "math", device="cpu", forced="math")
    flash = next(a for a in advice if a.rule == "backend" and "FLASH_ATTENTION" in a.suggestion)
    assert flash.helps and flash.alternative_us < flash.current_us * (1 - ADVICE_MIN_GAIN), flash
    assert flash.call == 0 and flash.current_us > 0


def test_each_rule_tries_its_change_where_the_call_invites_it() -> None:
    # a float mask, a strided value, a head dimension of 80: every rule has something to try
    value = _t([1, 4, 64, 80], strides=[20480, 80, 320, 1])
    call = SdpaCall(query=_t([1, 4, 64, 80]), key=_t([1, 4, 64, 80]), value=value, attn_mask=_t([1, 1, 64, 64]))
    advice = advise([call], "cpu_flash", device="cpu")
    tried = {a.rule for a in advice}
    assert tried == {"backend", "mask", "contiguous", "head_dim"}, advice
    suggestions = [a.suggestion for a in advice if a.rule == "mask"]
    assert any("boolean" in s for s in suggestions) and "pass is_causal=True instead of the mask" in suggestions
    pad = next(a for a in advice if a.rule == "head_dim")
    assert "from 80 to 96" in pad.suggestion and pad.note is not None and "1/sqrt" in pad.note


def test_rules_switched_off_are_not_tried_and_a_plain_call_gets_only_the_backend_rule() -> None:
    call = SdpaCall(query=_t([1, 2, 32, 64]), key=_t([1, 2, 32, 64]), value=_t([1, 2, 32, 64]))
    assert advise([call], "cpu_flash", device="cpu", off=("backend", "mask", "contiguous", "head_dim")) == []
    assert {a.rule for a in advise([call], "cpu_flash", device="cpu")} == {"backend"}


def test_the_report_shows_only_advice_that_helped_fastest_first() -> None:
    kept = [
        Advice(rule="mask", call=0, suggestion="drop the mask", current_us=100, alternative_us=80, helps=True),
        Advice(rule="head_dim", call=0, suggestion="pad", current_us=100, alternative_us=130, helps=False),
        Advice(rule="backend", call=0, suggestion="take flash", current_us=100, alternative_us=50, helps=True),
    ]
    case = make_case("decode").model_copy(update={"advice": kept})
    lines = advice_lines(case)
    assert len(lines) == 2 and lines[0].startswith("ADVICE (backend): take flash: would take 50")
    assert "instead of 100" in lines[0] and "50% less, measured here" in lines[0]
    assert advice_lines(make_case("decode")) == []


SUITE = '[suite]\nname = "s"\n{advice}\n[[cases]]\nname = "a"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 8\nhead_dim = 8\n'


def test_the_suite_switches_rules_off_by_name() -> None:
    assert parse_suite(SUITE.format(advice="")).advice_off == ()
    assert parse_suite(SUITE.format(advice='[suite.advice]\noff = ["mask"]')).advice_off == ("mask",)
    assert parse_suite(SUITE.format(advice='[suite.advice]\noff = ["output"]')).advice_off == ("output",)
    assert parse_suite(SUITE.format(advice='[suite.advice]\noff = ["all"]')).advice_off == ADVICE_RULES
    with pytest.raises(SuiteError) as err:
        parse_suite(SUITE.format(advice='[suite.advice]\noff = ["masks"]'))
    assert err.value.key == "suite.advice.off" and "backend" in str(err.value)
    with pytest.raises(SuiteError) as err:
        parse_suite(SUITE.format(advice='[suite.advice]\nrules = ["mask"]'))
    assert err.value.key == "suite.advice.rules"


def test_a_step_without_sdpa_is_timed_beside_sdpa_on_its_shapes() -> None:
    # an unfused attention written out (matmul, softmax, matmul) against PyTorch's fused path on the same shapes
    import torch

    from attnprof.core.measure.advice import beside_sdpa

    q, k, v = (torch.randn(1, 8, 512, 64) for _ in range(3))

    def unfused() -> torch.Tensor:
        scores = (q @ k.transpose(-1, -2)) * 64**-0.5
        mask = torch.ones(512, 512, dtype=torch.bool).tril()
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v

    (advice,) = beside_sdpa(unfused, device="cpu", dtype=torch.float32, shape=(1, 8, 8, 512, 512, 64), causal=True)
    assert advice.rule == "sdpa" and advice.call is None and "is_causal=True" in advice.suggestion
    assert advice.helps and advice.alternative_us < advice.current_us, advice
    assert (
        beside_sdpa(
            unfused, device="cpu", dtype=torch.float32, shape=(1, 8, 8, 512, 512, 64), causal=True, off=("sdpa",)
        )
        == []
    )


def test_the_gqa_rule_passes_the_unexpanded_heads_with_enable_gqa() -> None:
    kv = _t([1, 16, 256, 64])
    call = SdpaCall(query=_t([1, 16, 256, 64]), key=kv, value=kv, kv_heads_expanded_from=2)
    advice = advise([call], "cpu_flash", device="cpu", off=("backend",))
    (gqa,) = [a for a in advice if a.rule == "gqa"]
    assert "their 2 heads and enable_gqa=True instead of expanding them to 16" in gqa.suggestion
    assert gqa.alternative_us > 0 and gqa.note is not None
    assert not [
        a
        for a in advise([call.model_copy(update={"kv_heads_expanded_from": None})], "cpu_flash", device="cpu")
        if a.rule == "gqa"
    ]


def test_a_rule_that_does_not_help_is_kept_but_not_advised() -> None:
    # PyTorch's fused CPU path ran; the backend rule's try of math is well over 5% slower: tried, kept, not advice
    call = SdpaCall(query=_t([1, 8, 512, 64]), key=_t([1, 8, 512, 64]), value=_t([1, 8, 512, 64]))
    advice = advise([call], "cpu_flash", device="cpu")
    math_try = next(a for a in advice if a.rule == "backend" and "MATH" in a.suggestion)
    assert not math_try.helps and math_try.alternative_us > math_try.current_us, math_try
    case = make_case("decode").model_copy(update={"advice": advice})
    assert not any("MATH" in line for line in advice_lines(case))


BLOCK = (1, 2, 2, 32, 32, 16)  # (batch, q_heads, kv_heads, seq_q, seq_kv, head_dim)


def test_the_output_rule_times_a_blocks_path_into_its_output_projection_with_the_heads_copied() -> None:
    # Both paths timed for real. Which is faster is not asserted: on the CPU the three copies are 10% to 60% of this
    # path from run to run, too close to the 5% line on a shared CPU; the decision is the next test's.
    import torch

    from attnprof.core.measure.advice import block_output

    (advice,) = block_output(device="cpu", dtype=torch.float32, shape=BLOCK, causal=True)
    assert advice.rule == "output" and advice.call is None and ".contiguous()" in advice.suggestion
    assert advice.current_us > 0 and advice.alternative_us > 0, advice
    assert advice.helps == (advice.alternative_us < advice.current_us * (1 - ADVICE_MIN_GAIN)), advice
    assert advice.note is not None and "fused projection" in advice.note
    assert block_output(device="cpu", dtype=torch.float32, shape=BLOCK, causal=True, off=("output",)) == []


@pytest.mark.parametrize(("off_the_line_us", "helps"), [(-1.0, True), (1.0, False), (30.0, False)])
def test_the_output_rule_advises_only_a_path_faster_by_the_minimum_gain(
    monkeypatch: pytest.MonkeyPatch, off_the_line_us: float, helps: bool
) -> None:
    # both paths run once for real; their medians are set about the 5% line, so the decision is what is under test
    import torch

    from attnprof.core.measure import advice as advice_module

    candidate_us = 100.0 * (1 - ADVICE_MIN_GAIN) + off_the_line_us

    def medians(found: list[Any], device: str) -> list[tuple[Any, float]]:
        for variant in found:
            variant.run()
        return [(found[0], 100e-6), (found[1], candidate_us * 1e-6)]

    monkeypatch.setattr(advice_module, "_timed", medians)
    (advice,) = advice_module.block_output(device="cpu", dtype=torch.float32, shape=BLOCK, causal=False)
    assert (advice.current_us, advice.alternative_us, advice.helps) == (100.0, round(candidate_us, 3), helps)
    lines = advice_lines(make_case("decode").model_copy(update={"advice": [advice]}))
    assert len(lines) == int(helps) and all(line.startswith("ADVICE (output): copy query, key") for line in lines)
