"""FLOPs and bytes, occupancy, datasheet peaks and the roofline: plain arithmetic, torch-free."""

from attnprof.core.model.occupancy import SM_LIMITS, Occupancy, SmLimits, sm_limits, theoretical_occupancy
from attnprof.core.model.ops import element_bytes, elementwise_work, gemm_work
from attnprof.core.model.peaks import DATASHEET, DatasheetEntry, datasheet_entry, datasheet_peaks
from attnprof.core.model.roofline import (
    arithmetic_intensity,
    classify_bound,
    counter_bound,
    dtype_peak_key,
    rates,
    ridge_point,
    utilisations,
)
from attnprof.core.model.work import (
    AttentionShape,
    CaseWork,
    attended_pairs,
    attention_flops,
    case_work,
    dtype_bytes,
    fused_bytes_min,
    kernel_work,
    score_bytes_min,
    unfused_bytes_min,
)

__all__ = [
    "DATASHEET",
    "SM_LIMITS",
    "AttentionShape",
    "CaseWork",
    "DatasheetEntry",
    "Occupancy",
    "SmLimits",
    "arithmetic_intensity",
    "attended_pairs",
    "attention_flops",
    "case_work",
    "classify_bound",
    "counter_bound",
    "datasheet_entry",
    "datasheet_peaks",
    "dtype_bytes",
    "dtype_peak_key",
    "element_bytes",
    "elementwise_work",
    "fused_bytes_min",
    "gemm_work",
    "kernel_work",
    "rates",
    "ridge_point",
    "score_bytes_min",
    "sm_limits",
    "theoretical_occupancy",
    "unfused_bytes_min",
    "utilisations",
]
