"""How `bench/h200_truth_report.py` pairs the trace pass's kernels with Nsight Compute's launches: by name as both
tools spell it, then by grid, in order; on synthetic names and on the committed H200 data
(`bench/reports/data/h200-truth-2026-12-04`: five profile processes and both ncu passes)."""

from __future__ import annotations

from functools import cache

from bench.h200_truth_report import Data, match_launches, name_signature, same_signature
from tests.profiling_support import REPO

TRUTH = REPO / "bench" / "reports" / "data" / "h200-truth-2026-12-04"


@cache
def _data() -> Data:
    return Data(TRUTH)


def test_kineto_and_ncu_spell_one_kernel_alike_and_two_elementwise_kernels_apart() -> None:
    kineto = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<"
        "float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
    )
    ncu = (
        "void at::vectorized_elementwise_kernel<4, at::BinaryFunctor<float, float, float, "
        "binary_internal::MulFunctor<float>>, std::array<char *, 3>>(int, T2, T3)"
    )
    copy = (
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >"
        "(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
        "std::array<char*, 2ul>)"
    )
    assert same_signature(name_signature(kineto), name_signature(ncu))
    assert not same_signature(name_signature(copy), name_signature(ncu))


def test_launches_match_the_documents_kernels_by_name_and_grid_in_order() -> None:
    case = next(c for c in _data().cases("validation") if c.id == "naive-bwd")
    launches = [(name, grid) for name, grid, _values in _data().ncu["validation/naive-bwd"]]
    got = match_launches(case.kernels, launches)
    assert sum(len(v) for v in got.values()) == len(launches)
    for i, js in got.items():
        assert len(js) == round(case.kernels[i].launches_per_iter)
        assert all(tuple(launches[j][1] or ()) == tuple(case.kernels[i].grid or ()) for j in js)


def test_every_heavy_kernel_finds_its_ncu_launches_where_elementwise_kernels_share_a_base_name() -> None:
    heavy = [r for r in _data().rows if r.heavy]
    assert len(heavy) >= 100 and all(r.ncu_us is not None for r in heavy)
    rows = [r for r in heavy if r.case.id == "sdpa[backend=math,pass=fwd_bwd]"]
    (mul,) = [r for r in rows if r.kernel.key == "elementwise:mul"]
    assert abs(mul.delta or 1) < 0.05  # its own launch (366 µs), not a copy's
