"""The zoo's changes: each a pull request against the project in ``project/`` (the package ``zooattn`` and its suites
in ``perf/``), written as hunks that replace one exact piece of a file.

``expected`` is what the change should do to the suite's time, from how it works; the ground truth (``truth.py``)
measures it. ``ORDER`` is the order a budgeted run takes them in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (present exactly once in ``path``) by ``new``."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Change:
    name: str
    title: str  # the pull request's title
    suite: str  # the suite file in the project the change is checked with
    edits: tuple[Edit, ...]
    expected: str  # the effect foreseen, in words
    identical: bool = False  # the trees do the same work (an A/A pair)
    cpu: bool = False  # runs on a CPU host (no Triton, no CUDA graphs, no compiler): the quick mode's choices


_DECODE_STEP = """    q = apply_rope(q, cos, sin)
    return F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
"""

_PARAMS = "    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor\n"
_MASKED_PARAMS = (
    "    q: torch.Tensor,\n    k_cache: torch.Tensor,\n    v_cache: torch.Tensor,\n    cos: torch.Tensor,\n"
    "    sin: torch.Tensor,\n    mask: torch.Tensor | None = None,\n"
)
_STEP_DOC = '    """q [B, Hq, 1, D] of the new token; k_cache and v_cache [B, Hkv, S, D]; returns [B, Hq, 1, D]."""\n'

_ATTEND = """    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
"""

_WRITTEN: tuple[Change, ...] = (
    Change(
        name="identical-docs",
        title="Explain the launch configuration and the base-2 softmax",
        suite="perf/smoke.toml",
        identical=True,
        expected="none: comments and a docstring (the kernel's source changes, so Triton compiles it again)",
        edits=(
            Edit(
                "zooattn/triton_attn.py",
                "# Launch configuration for head_dim 64 in fp16: 128 queries by 64 keys per step, four warps, three "
                "pipeline stages.\n",
                "# Launch configuration, tuned for head_dim 64 in fp16: each program takes 128 queries and walks the "
                "keys 64 at a\n# time, with four warps and three pipeline stages.\n",
            ),
            Edit(
                "zooattn/_flash_kernel.py",
                "    # exp2 instead of exp: fold log2(e) into the scale once.\n",
                "    # The softmax runs in base 2 (exp2 is one instruction, exp is two): log2(e) is folded into the "
                "scale here,\n    # once, instead of into every score.\n",
            ),
            Edit(
                "zooattn/decode.py",
                _STEP_DOC,
                '    """Attention of the new token over the cache.\n\n    q [B, Hq, 1, D] of the new token, before '
                "its rotary embedding; k_cache and v_cache [B, Hkv, S, D], already\n    rotated; returns [B, Hq, 1, "
                'D]."""\n',
            ),
        ),
    ),
    Change(
        name="extra-pass",
        title="Scale the attention output by the layer's output scale",
        suite="perf/decode.toml",
        expected="+1-2%: one more elementwise kernel on the decode step's small output",
        cpu=True,
        edits=(
            Edit(
                "zooattn/decode.py",
                "USE_CUDA_GRAPHS = True\n",
                "USE_CUDA_GRAPHS = True\n# The layer's output scale (1.0 until checkpoints carry their own).\n"
                "OUTPUT_SCALE = 1.0\n",
            ),
            Edit(
                "zooattn/decode.py",
                _DECODE_STEP,
                "    q = apply_rope(q, cos, sin)\n"
                "    out = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)\n"
                "    return out * OUTPUT_SCALE\n",
            ),
        ),
    ),
    Change(
        name="launch-config",
        title="Triton forward: walk the keys 32 at a time",
        suite="perf/triton.toml",
        expected="+10-25%: half the keys per step, twice the loop iterations and smaller tensor-core tiles",
        edits=(
            Edit(
                "zooattn/triton_attn.py",
                "BLOCK_N = 64\n",
                "BLOCK_N = 32  # smaller key blocks: less shared memory per stage\n",
            ),
        ),
    ),
    Change(
        name="explicit-mask",
        title="Decode: pass the padding mask to SDPA explicitly",
        suite="perf/decode.toml",
        expected="+3-10%: an all-true boolean mask makes SDPA leave its mask-free kernel for one that reads a mask",
        edits=(
            Edit(
                "zooattn/decode.py",
                _PARAMS + ") -> torch.Tensor:\n" + _STEP_DOC,
                _MASKED_PARAMS + ") -> torch.Tensor:\n" + _STEP_DOC[:-4] + "\n"
                "    mask [B, 1, 1, S]: True where a cache position holds a token of its sequence "
                '(None: every one)."""\n',
            ),
            Edit(
                "zooattn/decode.py",
                _DECODE_STEP,
                "    q = apply_rope(q, cos, sin)\n"
                "    return F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask, enable_gqa=True)\n",
            ),
            Edit(
                "zooattn/decode.py",
                "def reference(\n" + _PARAMS + ") -> torch.Tensor:\n"
                "    return _common.reference_attention(apply_rope(q, cos, sin), k_cache, v_cache)\n",
                "def reference(\n" + _MASKED_PARAMS + ") -> torch.Tensor:\n"
                "    return _common.reference_attention(apply_rope(q, cos, sin), k_cache, v_cache, mask=mask)\n",
            ),
            Edit(
                "zooattn/decode.py",
                '    """The attnprof factory: one decode step against a KV cache of ``seq_kv`` tokens."""\n'
                '    return {"fn": decode_step, "args": _inputs(params, device), "reference": reference}\n',
                '    """The attnprof factory: one decode step against a KV cache of ``seq_kv`` tokens."""\n'
                "    q, k_cache, v_cache, cos, sin = _inputs(params, device)\n"
                "    # Every cache position holds a token here; serving passes its sequences' real lengths.\n"
                "    mask = torch.ones(q.shape[0], 1, 1, k_cache.shape[2], dtype=torch.bool, device=device)\n"
                '    return {"fn": decode_step, "args": (q, k_cache, v_cache, cos, sin, mask), '
                '"reference": reference}\n',
            ),
        ),
    ),
    Change(
        name="token-counter",
        title="Count prefill tokens on the device (no host sync)",
        suite="perf/prefill.toml",
        expected="+0.3-0.7%: one tiny kernel (an add into a counter) beside a ~0.5 ms prefill",
        edits=(
            Edit(
                "zooattn/prefill.py",
                "from . import _common, config\n",
                "from . import _common, config\n\n"
                "# Tokens prefilled so far, per device: kept on the device so that counting never waits for it.\n"
                "_tokens_seen: dict[torch.device, torch.Tensor] = {}\n",
            ),
            Edit(
                "zooattn/prefill.py",
                _ATTEND,
                "    counter = _tokens_seen.get(q.device)\n"
                "    if counter is None:\n"
                "        counter = _tokens_seen[q.device] = torch.zeros((), dtype=torch.int64, device=q.device)\n"
                "    counter.add_(q.shape[0] * q.shape[1])\n" + _ATTEND,
            ),
        ),
    ),
    Change(
        name="rope-fp32",
        title="Decode: rotary embedding in fp32",
        suite="perf/decode.toml",
        expected="+1-4%: q cast to fp32 and back (two small kernels) and the rotary arithmetic at twice the width",
        edits=(
            Edit(
                "zooattn/decode.py",
                _DECODE_STEP,
                "    # In fp32: bf16 angles lose the low bits of long positions.\n"
                "    q = apply_rope(q.float(), cos, sin).to(q.dtype)\n"
                "    return F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)\n",
            ),
            Edit(
                "zooattn/decode.py",
                "    cos, sin = rope_tables(s - 1, d, device=device, dtype=dtype)\n",
                "    cos, sin = rope_tables(s - 1, d, device=device, dtype=torch.float32)\n",
            ),
        ),
    ),
    Change(
        name="identical-refactor",
        title="Decode: factor out rotate_half",
        suite="perf/serving.toml",
        identical=True,
        cpu=True,
        expected="none: the same operations, reorganised (a helper function, renamed locals)",
        edits=(
            Edit(
                "zooattn/decode.py",
                "def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:\n"
                "    x1, x2 = x.chunk(2, dim=-1)\n"
                "    rotated = torch.cat((-x2, x1), dim=-1)\n"
                "    return x * cos + rotated * sin\n",
                "def rotate_half(x: torch.Tensor) -> torch.Tensor:\n"
                "    first, second = x.chunk(2, dim=-1)\n"
                "    return torch.cat((-second, first), dim=-1)\n\n\n"
                "def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:\n"
                '    """x rotated pairwise by the angles whose cos and sin are given."""\n'
                "    return x * cos + rotate_half(x) * sin\n",
            ),
            Edit(
                "zooattn/decode.py",
                _DECODE_STEP,
                "    rotated_q = apply_rope(q, cos, sin)\n"
                "    return F.scaled_dot_product_attention(rotated_q, k_cache, v_cache, enable_gqa=True)\n",
            ),
        ),
    ),
    Change(
        name="host-sync",
        title="Decode: fail fast on non-finite attention output",
        suite="perf/decode.toml",
        expected="+3-10%: two small kernels and a device-to-host copy that waits for the step (.item())",
        edits=(
            Edit(
                "zooattn/decode.py",
                _DECODE_STEP,
                "    q = apply_rope(q, cos, sin)\n"
                "    out = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)\n"
                "    if not torch.isfinite(out).all().item():\n"
                '        raise FloatingPointError("decode step: non-finite attention output")\n'
                "    return out\n",
            ),
        ),
    ),
    Change(
        name="gqa-repeat",
        title="Prefill: expand KV heads with repeat_interleave instead of enable_gqa",
        suite="perf/prefill.toml",
        expected="+5-15%: k and v copied four times over (and SDPA may pick another backend without enable_gqa)",
        edits=(
            Edit(
                "zooattn/prefill.py",
                _ATTEND,
                "    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)\n"
                "    if q.shape[1] != k.shape[1]:  # every backend takes equal head counts\n"
                "        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)\n"
                "        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)\n"
                "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n",
            ),
        ),
    ),
    Change(
        name="contiguous",
        title="Prefill: hand SDPA contiguous inputs",
        suite="perf/prefill.toml",
        expected="+8-15%: q, k and v copied into [B, H, S, D] before the kernel (about 100 MB moved)",
        edits=(
            Edit(
                "zooattn/prefill.py",
                "    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)\n"
                "    return F.scaled_dot_product_attention(",
                "    # Contiguous [B, H, S, D]: some SDPA backends copy strided inputs anyway.\n"
                "    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))\n"
                "    return F.scaled_dot_product_attention(",
            ),
        ),
    ),
    Change(
        name="graphs-off",
        title="Decode: launch the step eagerly (no CUDA graph)",
        suite="perf/graphed.toml",
        expected="+1-8%: the step's seven kernels launched one by one, with a gap between each, instead of replayed",
        edits=(Edit("zooattn/decode.py", "USE_CUDA_GRAPHS = True\n", "USE_CUDA_GRAPHS = False\n"),),
    ),
    Change(
        name="autotune-pruned",
        title="Triton autotune: drop the 128-row tiles",
        suite="perf/autotuned.toml",
        expected="+5-20% if a 128-row tile won the tuning (the autotuner then keeps a 64-row one), else none",
        edits=(
            Edit(
                "zooattn/triton_autotuned.py",
                "    (128, 64, 8, 3),\n    (128, 32, 4, 3),\n",
                "    # 128-row tiles spill registers at head_dim 128 on smaller GPUs: left out.\n",
            ),
        ),
    ),
    Change(
        name="head-dim-80",
        title="Model: 32 heads of 80 instead of 40 heads of 64",
        suite="perf/model.toml",
        expected="+5-20%: the same FLOPs, but a head size the fused kernels pad (80 to 96 or 128)",
        edits=(Edit("zooattn/config.py", "HEAD_DIM = 64\n", "HEAD_DIM = 80\n"),),
    ),
    Change(
        name="compile-default",
        title="softcap: compile in the default mode (max-autotune compiles take minutes)",
        suite="perf/softcap.toml",
        expected="-5% to +5%: Inductor's default block sizes for the reduction instead of tuned ones",
        edits=(
            Edit(
                "zooattn/softcap.py",
                "# Inductor's tuning: max-autotune also searches the reduction kernels' block sizes "
                '(coordinate descent).\nCOMPILE_MODE = "max-autotune-no-cudagraphs"\n',
                'COMPILE_MODE = "default"\n',
            ),
        ),
    ),
)

# Small effects first (what the 1% target is about), each identical pair early, the slowest to build (a max-autotune
# compile) last: a run stopped by its budget has measured what matters most.
ORDER = (
    "identical-docs",
    "extra-pass",
    "rope-fp32",
    "identical-refactor",
    "explicit-mask",
    "host-sync",
    "token-counter",
    "graphs-off",
    "launch-config",
    "gqa-repeat",
    "contiguous",
    "autotune-pruned",
    "head-dim-80",
    "compile-default",
)
CHANGES: tuple[Change, ...] = tuple(sorted(_WRITTEN, key=lambda c: ORDER.index(c.name)))
BY_NAME = {c.name: c for c in CHANGES}
QUICK = ("identical-refactor", "extra-pass")


def select(only: str | None, *, quick: bool) -> list[Change]:
    """The changes named in ``only`` (comma-separated, in the zoo's order), or the quick mode's two, or all."""
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        unknown = sorted(set(names) - set(BY_NAME))
        if unknown:
            raise SystemExit(f"unknown change(s) {', '.join(unknown)}: choose from {', '.join(BY_NAME)}")
        return [c for c in CHANGES if c.name in names]
    if quick:
        return [BY_NAME[n] for n in QUICK]
    return list(CHANGES)
