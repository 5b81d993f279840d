"""The suite file: parsing, grid expansion, ids, defaults and every rejected input (docs/architecture.md, "Suite
file")."""

from __future__ import annotations

import hashlib
import json
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnprof.core.errors import SuiteError
from attnprof.core.suite import (
    MAX_CASES,
    MAX_NESTING,
    CaseSpec,
    Suite,
    TimingConfig,
    load_suite,
    parse_suite,
    select_cases,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# The example of docs/architecture.md, "Suite file", verbatim.
SUITE_EXAMPLE = """\
[suite]
name = "llama7b"
thresholds = { latency = 0.02 }

[[cases]]
name = "prefill"
target = "sdpa"
backends = ["cudnn", "flash", "efficient", "math"]
batch = 1
q_heads = 32
seq_q = [512, 2048]          # seq_kv follows seq_q
head_dim = 128
dtype = "bf16"
causal = true
pass = ["fwd", "fwd_bwd"]    # ids: prefill[backend=cudnn,seq_q=512,pass=fwd], ...

[[cases]]
name = "my-kernel"
target = "mypkg.attention:make_case"
batch = 4
q_heads = 16
kv_heads = 4
seq_q = 4096
head_dim = 64
dtype = "fp16"
args = { block_n = 64 }
thresholds = { latency = 0.05 }
"""

HEAD = '[suite]\nname = "s"\n'
SHAPE = "q_heads = 8\nseq_q = 128\nhead_dim = 64\n"


def one_case(body: str, *, target: str = "sdpa", shape: bool = True, head: str = HEAD) -> str:
    """A suite holding one case named "c" with ``body`` as its extra lines."""
    lines = f'[[cases]]\nname = "c"\ntarget = "{target}"\n' + (SHAPE if shape else "")
    return head + lines + textwrap.dedent(body)


def ids(suite: Suite) -> list[str]:
    return [c.id for c in suite.cases]


def reject(text: str) -> SuiteError:
    with pytest.raises(SuiteError) as info:
        parse_suite(text)
    return info.value


# --- grids and ids ---------------------------------------------------------------------------------


def test_suite_example_expands_to_the_grid_with_ids_in_file_order() -> None:
    suite = parse_suite(SUITE_EXAMPLE)
    assert suite.name == "llama7b"
    assert len(suite.cases) == 4 * 2 * 2 + 1
    expected = [
        f"prefill[backend={b},seq_q={s},pass={p}]"
        for b in ("cudnn", "flash", "efficient", "math")
        for s in (512, 2048)
        for p in ("fwd", "fwd_bwd")
    ]
    assert ids(suite) == [*expected, "my-kernel"]
    first = suite.cases[0]
    assert first.grid == {"backend": "cudnn", "seq_q": 512, "pass": "fwd"}
    assert list(first.grid) == ["backend", "seq_q", "pass"]
    assert first.backend == "cudnn"
    assert first.causal is True
    assert first.pass_ == "fwd"


def test_suite_example_custom_case_keeps_its_args_and_gqa_shape() -> None:
    kernel = parse_suite(SUITE_EXAMPLE).cases[-1]
    assert kernel.id == "my-kernel"
    assert kernel.is_custom
    assert kernel.has_shape
    assert kernel.grid == {}
    assert kernel.backend is None
    assert kernel.params["args"] == {"block_n": 64}
    assert (kernel.batch, kernel.q_heads, kernel.kv_heads, kernel.seq_q, kernel.seq_kv, kernel.head_dim) == (
        4,
        16,
        4,
        4096,
        4096,
        64,
    )
    assert kernel.dtype == "fp16"


def test_id_keys_follow_file_order_and_first_key_varies_slowest() -> None:
    text = one_case('pass = ["fwd", "fwd_bwd"]\ndtype = ["fp16", "bf16"]\n')
    assert ids(parse_suite(text)) == [
        "c[pass=fwd,dtype=fp16]",
        "c[pass=fwd,dtype=bf16]",
        "c[pass=fwd_bwd,dtype=fp16]",
        "c[pass=fwd_bwd,dtype=bf16]",
    ]
    swapped = one_case('dtype = ["fp16", "bf16"]\npass = ["fwd", "fwd_bwd"]\n')
    assert ids(parse_suite(swapped))[1] == "c[dtype=fp16,pass=fwd_bwd]"


def test_no_list_values_gives_the_bare_name() -> None:
    suite = parse_suite(one_case('backends = "flash"\ncausal = true\n'))
    assert ids(suite) == ["c"]
    assert suite.cases[0].backend == "flash"
    assert suite.cases[0].grid == {}


def test_one_element_list_is_still_a_grid_key() -> None:
    assert ids(parse_suite(one_case('backends = ["flash"]\n'))) == ["c[backend=flash]"]


def test_booleans_in_ids_are_lowercase() -> None:
    suite = parse_suite(one_case("causal = [true, false]\n"))
    assert ids(suite) == ["c[causal=true]", "c[causal=false]"]
    assert [c.causal for c in suite.cases] == [True, False]


def test_singular_backend_is_a_synonym_shown_as_backend() -> None:
    suite = parse_suite(one_case('backend = ["math", "flash"]\n'))
    assert ids(suite) == ["c[backend=math]", "c[backend=flash]"]


def test_seq_kv_follows_each_expanded_seq_q_unless_given() -> None:
    head = HEAD + '[[cases]]\nname = "c"\ntarget = "naive"\nq_heads = 8\nhead_dim = 64\n'
    suite = parse_suite(head + "seq_q = [128, 256]\n")
    assert [(c.seq_q, c.seq_kv) for c in suite.cases] == [(128, 128), (256, 256)]
    cross = parse_suite(head + "seq_q = [128, 256]\nseq_kv = 1024\n")
    assert [(c.seq_q, c.seq_kv) for c in cross.cases] == [(128, 1024), (256, 1024)]


def test_kv_heads_defaults_to_each_expanded_q_heads() -> None:
    text = HEAD + '[[cases]]\nname = "c"\ntarget = "sdpa"\nq_heads = [8, 16]\nseq_q = 64\nhead_dim = 64\n'
    assert [(c.q_heads, c.kv_heads) for c in parse_suite(text).cases] == [(8, 8), (16, 16)]


def test_defaults_are_filled_in_canonical_order() -> None:
    case = parse_suite(one_case("")).cases[0]
    assert case.params == {
        "batch": 1,
        "q_heads": 8,
        "kv_heads": 8,
        "seq_q": 128,
        "seq_kv": 128,
        "head_dim": 64,
        "dtype": "bf16",
        "causal": False,
        "pass": "fwd",
        "backend": "default",
    }
    assert list(case.params)[-4:] == ["dtype", "causal", "pass", "backend"]


def test_target_specific_params() -> None:
    naive = parse_suite(one_case("", target="naive")).cases[0]
    assert "backend" not in naive.params and naive.backend is None
    block = parse_suite(one_case("", target="block")).cases[0]
    assert block.params["ffn_hidden"] == 4 * 8 * 64
    sized = parse_suite(one_case("ffn_hidden = 1000\n", target="block")).cases[0]
    assert sized.params["ffn_hidden"] == 1000
    flex = parse_suite(one_case("", target="flex")).cases[0]
    assert "window" not in flex.params
    windowed = parse_suite(one_case("window = [64, 128]\ncausal = true\n", target="flex"))
    assert ids(windowed) == ["c[window=64]", "c[window=128]"]
    assert windowed.cases[1].params["window"] == 128


def test_threshold_merging_case_wins_and_suite_values_are_copied() -> None:
    text = (
        '[suite]\nname = "s"\n[suite.thresholds]\nlatency = 0.02\nfdr = 0.05\n'
        '[[cases]]\nname = "a"\ntarget = "naive"\n' + SHAPE + "thresholds = { latency = 0.05, variance = 0.5 }\n"
        '[[cases]]\nname = "b"\ntarget = "naive"\n' + SHAPE
    )
    suite = parse_suite(text)
    assert suite.thresholds.latency == 0.02 and suite.thresholds.fdr == 0.05
    a, b = suite.cases
    assert (a.thresholds.latency, a.thresholds.variance, a.thresholds.fdr) == (0.05, 0.5, 0.05)
    assert (b.thresholds.latency, b.thresholds.variance, b.thresholds.fdr) == (0.02, None, 0.05)


def test_custom_target_syntax() -> None:
    for target in ("mypkg:make", "my_pkg.sub.mod:make_case", "_p:_f"):
        case = parse_suite(one_case("", target=target)).cases[0]
        assert case.is_custom and case.target == target
    for target in (
        "mypkg",
        "mypkg:",
        ":f",
        "1pkg:f",
        "pkg..mod:f",
        "pkg.:f",
        "pkg:f.g",
        "pkg mod:f",
        "pkg:f:g",
    ):
        err = reject(one_case("", target=target))
        assert err.key == "cases[0].target", target
        assert "package.module:factory" in err.detail


def test_custom_target_shape_is_optional() -> None:
    case = parse_suite(one_case('args = { n = 3 }\npass = "fwd_bwd"\n', target="m:f", shape=False)).cases[0]
    assert not case.has_shape
    assert case.params == {"batch": 1, "dtype": "bf16", "causal": False, "pass": "fwd_bwd", "args": {"n": 3}}
    with pytest.raises(ValueError, match="has no q_heads"):
        _ = case.q_heads


def test_args_are_copied_per_case() -> None:
    suite = parse_suite(one_case('args = { tile = [64, 64] }\npass = ["fwd", "fwd_bwd"]\n', target="m:f"))
    suite.cases[0].params["args"]["tile"].append(1)
    assert suite.cases[1].params["args"] == {"tile": [64, 64]}


def test_timing_defaults_and_overrides() -> None:
    assert parse_suite(one_case("")).timing == TimingConfig()
    head = HEAD + "[suite.timing]\nwarmup = 0\nmin_samples = 3\nmax_samples = 3\nbudget_s = 1\n"
    timing = parse_suite(one_case("", head=head)).timing
    assert (timing.warmup, timing.min_samples, timing.max_samples) == (0, 3, 3)
    assert timing.budget_s == 1.0 and isinstance(timing.budget_s, float)


def test_timing_config_validates_direct_construction() -> None:
    with pytest.raises(SuiteError) as info:
        TimingConfig(min_samples=50, max_samples=40)
    assert info.value.key == "suite.timing.max_samples"
    assert "max_samples (40) must be >= min_samples (50)" in info.value.detail


# --- rejected inputs -------------------------------------------------------------------------------

CASE = '[[cases]]\nname = "c"\ntarget = "sdpa"\n' + SHAPE


def bare(body: str) -> str:
    """A one-case suite whose shape keys all come from ``body``."""
    return one_case(body, shape=False)


def with_timing(entries: str) -> str:
    return HEAD + f"timing = {{ {entries} }}\n" + CASE


def renamed(name: str) -> str:
    return one_case("").replace('name = "c"', f"name = {name}")


GRID_2400 = "batch = [" + ", ".join(str(i) for i in range(1, 201)) + "]\ndtype = ['fp32', 'fp16', 'bf16']\n"
GRID_2400 += "pass = ['fwd', 'fwd_bwd']\ncausal = [true, false]\n"

BAD = [
    # (id, toml, key, message fragment)
    ("unknown top key", "sute = 1\n" + HEAD + CASE, "sute", "did you mean 'suite'"),
    ("missing suite", CASE, "suite", "missing the [suite] table"),
    ("suite not a table", "suite = 1\n" + CASE, "suite", "must be a table"),
    ("unknown suite key", HEAD + "nmae = 1\n" + CASE, "suite.nmae", "did you mean 'name'"),
    ("suite name missing", "[suite]\n" + CASE, "suite.name", "missing required key 'name'"),
    ("suite name empty", '[suite]\nname = ""\n' + CASE, "suite.name", "non-empty string"),
    ("no cases", HEAD, "cases", "at least one case"),
    ("empty cases", "cases = []\n" + HEAD, "cases", "at least one case"),
    ("cases not tables", "cases = [1]\n" + HEAD, "cases", "array of tables"),
    ("case name missing", HEAD + '[[cases]]\ntarget = "sdpa"\n' + SHAPE, "cases[0].name", "'name'"),
    ("case name bracket", renamed('"a[b]"'), "cases[0].name", "must not contain"),
    ("case name comma", renamed('"a,b"'), "cases[0].name", "must not contain ,"),
    ("case name equals", renamed('"a=b"'), "cases[0].name", "must not contain ="),
    ("case name list", renamed('["a", "b"]'), "cases[0].name", "non-empty string"),
    ("target missing", HEAD + '[[cases]]\nname = "c"\n' + SHAPE, "cases[0].target", "missing required key"),
    ("target list", one_case("").replace('"sdpa"', '["sdpa", "naive"]'), "cases[0].target", "one target"),
    ("unknown target", one_case("", target="sdap"), "cases[0].target", "built-ins are sdpa, flex, naive"),
    ("unknown case key", one_case("hed_dim = 64\n"), "cases[0].hed_dim", "did you mean 'head_dim'"),
    ("required q_heads", bare("seq_q = 1\nhead_dim = 8\n"), "cases[0].q_heads", "needs"),
    ("required head_dim", bare("q_heads = 1\nseq_q = 1\n"), "cases[0].head_dim", "needs"),
    ("args on built-in", one_case("args = { x = 1 }\n"), "cases[0].args", "custom factory"),
    ("args not a table", one_case("args = 3\n", target="m:f"), "cases[0].args", "must be a table"),
    ("args nan", one_case("args = { x = nan }\n", target="m:f"), "cases[0].args.x", "finite"),
    ("args date", one_case("args = { d = 2024-01-01 }\n", target="m:f"), "cases[0].args.d", "dates"),
    ("backends on naive", one_case('backends = "math"\n', target="naive"), "cases[0].backends", "sdpa only"),
    (
        "backend and backends",
        one_case('backend = "math"\nbackends = "flash"\n'),
        "cases[0].backend",
        "not both",
    ),
    ("window on sdpa", one_case("window = 64\n"), "cases[0].window", "flex only"),
    ("ffn_hidden on sdpa", one_case("ffn_hidden = 64\n"), "cases[0].ffn_hidden", "block only"),
    ("window zero", one_case("window = 0\n", target="flex"), "cases[0].window", "must be >= 1"),
    ("ffn_hidden zero", one_case("ffn_hidden = 0\n", target="block"), "cases[0].ffn_hidden", ">= 1"),
    ("head_dim zero", bare("head_dim = 0\nq_heads = 1\nseq_q = 1\n"), "cases[0].head_dim", ">= 1, got 0"),
    ("negative seq", bare("seq_q = -128\nq_heads = 1\nhead_dim = 8\n"), "cases[0].seq_q", ">= 1, got -128"),
    ("float dim", bare("seq_q = 512.0\nq_heads = 1\nhead_dim = 8\n"), "cases[0].seq_q", "write 512"),
    ("bool dim", one_case("batch = true\n"), "cases[0].batch", "must be an integer"),
    ("string dim", one_case('batch = "4"\n'), "cases[0].batch", "must be an integer"),
    ("huge dim", one_case("batch = 4294967296\n"), "cases[0].batch", "below 2**31"),
    ("wide head", bare("head_dim = 1024\nq_heads = 1\nseq_q = 1\n"), "cases[0].head_dim", "<= 512"),
    (
        "kv not divisor",
        bare("kv_heads = 5\nq_heads = 32\nseq_q = 8\nhead_dim = 8\n"),
        "cases[0].kv_heads",
        "q_heads (32) must be a multiple of kv_heads (5)",
    ),
    (
        "kv above q",
        one_case("kv_heads = 16\n"),
        "cases[0].kv_heads",
        "kv_heads (16) must not exceed q_heads (8)",
    ),
    ("dtype", one_case('dtype = "float16"\n'), "cases[0].dtype", "must be one of 'fp32', 'fp16', 'bf16'"),
    ("dtype suggestion", one_case('dtype = "bf61"\n'), "cases[0].dtype", "did you mean 'bf16'"),
    ("pass", one_case('pass = "bwd"\n'), "cases[0].pass", "'fwd', 'fwd_bwd'"),
    (
        "backend",
        one_case('backends = ["flash", "flash2"]\n'),
        "cases[0].backends",
        "'cudnn', 'flash', 'efficient'",
    ),
    ("causal string", one_case('causal = "yes"\n'), "cases[0].causal", "true or false"),
    ("empty list", one_case("batch = []\n"), "cases[0].batch", "empty list"),
    ("duplicate values", one_case("batch = [1, 2, 1]\n"), "cases[0].batch", "lists 1 twice"),
    (
        "score matrix",
        bare("batch = 64\nseq_kv = 2097152\nq_heads = 64\nseq_q = 4096\nhead_dim = 8\n"),
        "cases[0]",
        "exceeds the sanity limit of 2**40",
    ),
    ("block cross", one_case("seq_kv = 256\n", target="block"), "cases[0].seq_kv", "self-attention"),
    ("thresholds not table", one_case("thresholds = 0.02\n"), "cases[0].thresholds", "must be a table"),
    (
        "threshold unknown",
        one_case("thresholds = { latncy = 0.1 }\n"),
        "cases[0].thresholds.latncy",
        "did you mean 'latency'",
    ),
    (
        "threshold negative",
        one_case("thresholds = { latency = -0.1 }\n"),
        "cases[0].thresholds.latency",
        ">= 0",
    ),
    (
        "threshold string",
        one_case('thresholds = { latency = "2%" }\n'),
        "cases[0].thresholds.latency",
        "a number",
    ),
    (
        "threshold inf",
        one_case("thresholds = { variance = inf }\n"),
        "cases[0].thresholds.variance",
        "finite",
    ),
    ("fdr one", HEAD + "thresholds = { fdr = 1.0 }\n" + CASE, "suite.thresholds.fdr", "in (0, 1)"),
    ("fdr zero", HEAD + "thresholds = { fdr = 0 }\n" + CASE, "suite.thresholds.fdr", "in (0, 1)"),
    ("timing unknown", with_timing("budget = 1"), "suite.timing.budget", "did you mean 'budget_s'"),
    ("timing min_samples", with_timing("min_samples = 2"), "suite.timing.min_samples", "3..100000"),
    (
        "timing max<min",
        with_timing("max_samples = 20"),
        "suite.timing.max_samples",
        "max_samples (20) must be >= min_samples (30)",
    ),
    ("timing budget", with_timing("budget_s = 0"), "suite.timing.budget_s", "> 0"),
    ("timing warmup", with_timing("warmup = -1"), "suite.timing.warmup", "0..10000"),
    ("timing warmup float", with_timing("warmup = 1.5"), "suite.timing.warmup", "integer"),
    ("timing trace", with_timing("trace_iters = 51"), "suite.timing.trace_iters", "1..50"),
    ("timing ci", with_timing("target_rel_ci = 0"), "suite.timing.target_rel_ci", "in (0, 1)"),
    ("too many cases", one_case(GRID_2400), "cases[0]", f"at most {MAX_CASES}"),
]


@pytest.mark.parametrize(("text", "key", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_the_key_and_what_is_allowed(text: str, key: str, fragment: str) -> None:
    err = reject(text)
    assert err.key == key
    assert fragment in err.detail
    assert str(err).startswith("<string>: " + key)


def test_unknown_key_lists_the_allowed_keys_for_the_target() -> None:
    err = reject(one_case("blok = 1\n", target="block"))
    assert "ffn_hidden" in err.detail and "backends" not in err.detail


def test_errors_in_later_cases_carry_their_index() -> None:
    err = reject(one_case("") + '[[cases]]\nname = "d"\ntarget = "naive"\n' + SHAPE + "hed_dim = 1\n")
    assert err.key == "cases[1].hed_dim"


def test_expanded_case_errors_name_the_case_id() -> None:
    err = reject(one_case("kv_heads = [1, 3]\n"))
    assert err.key == "cases[0].kv_heads"
    assert "c[kv_heads=3]" in err.detail


def test_duplicate_ids_across_cases() -> None:
    err = reject(one_case("") + '[[cases]]\nname = "c"\ntarget = "naive"\n' + SHAPE)
    assert err.key == "cases[1].name"
    assert "duplicate case id 'c'" in err.detail and "cases[0]" in err.detail
    # The same name with a grid yields distinct ids, which is allowed.
    assert (
        len(
            parse_suite(
                one_case("")
                + '[[cases]]\nname = "c"\ntarget = "naive"\n'
                + SHAPE.replace("seq_q = 128", "seq_q = [128]")
            ).cases
        )
        == 2
    )


def test_bad_toml_reports_line_and_column() -> None:
    err = reject(HEAD + "[[cases]]\nname = \nq_heads = 1\n")
    assert err.key is None
    assert "invalid TOML" in err.detail and "line 4" in err.detail and "column" in err.detail


def test_oversized_text_is_rejected_before_parsing() -> None:
    err = reject(HEAD + "#" * (1 << 20) + "\n" + CASE)
    assert "larger than" in err.detail


# --- nesting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "what", "line"),
    [
        (HEAD + "x = " + "[" * 5000 + "]" * 5000 + "\n", "arrays and inline tables are", 3),
        (HEAD + "x = " + "{a = " * 5000 + "}" * 5000 + "\n", "arrays and inline tables are", 3),
        (HEAD + "x = " + "[{a = " * 2500 + "\n", "arrays and inline tables are", 3),
        (
            one_case("args = " + "[" * 40 + "]" * 40 + "\n", target="m:f", shape=False),
            "arrays and inline tables are",
            6,
        ),
        (HEAD + ".".join(["a"] * 2000) + " = 1\n", "a key is", 3),
        (HEAD + "[" + ".".join(['"a"'] * 2000) + "]\n", "a table header is", 3),
        (HEAD + "[[" + ".".join(["a"] * 32) + "]]\n", "a table header is", 3),
        (HEAD + "[" + ".".join(["a"] * 30) + "]\nb.c.d = 1\n", "a key is", 4),
        (HEAD + "x = [\n  1, # ]]]\n  " + "[" * 40 + "\n", "arrays and inline tables are", 5),
    ],
    ids=["arrays", "inline-tables", "mixed", "args", "dotted-key", "header", "array-of-tables", "header-key", "lines"],
)
def test_deep_nesting_is_refused_before_parsing(text: str, what: str, line: int) -> None:
    err = reject(text)
    assert err.key is None
    assert err.detail.startswith(f"line {line}: {what} nested more than {MAX_NESTING} levels deep")
    assert f"at most {MAX_NESTING} are allowed" in err.detail


def test_nesting_up_to_the_limit_is_accepted() -> None:
    # cases[0].args.v is four levels: 28 arrays more put the innermost value at the limit.
    deep = "[" * 28 + "1" + "]" * 28
    case = parse_suite(one_case(f"args = {{ v = {deep} }}\n", target="m:f", shape=False)).cases[0]
    value = case.params["args"]["v"]
    for _ in range(28):
        value = value[0]
    assert value == 1
    assert "levels deep" in reject(one_case(f"args = {{ v = [{deep}] }}\n", target="m:f", shape=False)).detail
    header = "[" + ".".join(["t"] * MAX_NESTING) + "]\n"
    assert "unknown key 't'" in reject(HEAD + CASE + header).detail  # at the limit: refused for its name only


def test_brackets_in_strings_and_comments_are_not_nesting() -> None:
    b = "[{" * 40
    body = f'args = {{ a = "{b}\\"{b}", b = \'{b}\', c = """{b}\n\\"""{b}""""",'
    body += f" d = '''{b}\n''{b}''''' }} # {b}\n"
    text = one_case(body, target="m:f", shape=False).replace("[[cases]]", f"# {b}\n[[cases]] # {b}")
    args = parse_suite(text).cases[0].params["args"]
    assert args["a"] == f'{b}"{b}' and args["b"] == b
    assert args["c"] == f'{b}\n"""{b}""' and args["d"] == f"{b}\n''{b}''"


def _depth(value: Any, here: int = 0) -> int:
    """Levels to the deepest value: a key or an array index is one (an array counts the slot of an element)."""
    if isinstance(value, dict):
        return max([here, *(_depth(v, here + 1) for v in value.values())])
    if isinstance(value, list):
        return max([here + 1, *(_depth(v, here + 1) for v in value)])
    return here


_KEYS = st.sampled_from(["k", "a-b", "1", "a.b", "[x]", "#", "'q'", '"dq"', "{"])
_TEXT = st.text(alphabet="ab[]{}#.=,'\"\\\n ", max_size=12)


def _toml_key(key: str, quote: int) -> str:
    if quote == 0 and key.replace("-", "").isalnum():
        return key
    if quote == 1 and "'" not in key:
        return f"'{key}'"
    return json.dumps(key)


def _toml_string(text: str, quote: int) -> str:
    """``text`` as a TOML string: basic, literal, multi-line literal or multi-line basic."""
    if quote == 1 and "'" not in text and "\n" not in text:
        return f"'{text}'"
    if quote == 2 and "'''" not in text and not text.endswith("'") and not text.startswith("\n"):
        return "'''" + text + "'''"
    if quote == 3:
        return '"""' + json.dumps(text)[1:-1] + '"""'
    return json.dumps(text)


@st.composite
def _toml_value(draw: st.DrawFn, levels: int) -> str:
    """An inline TOML value whose containers nest ``levels`` deep on one branch, with shallower siblings."""
    if levels == 0:
        return draw(st.one_of(st.integers(-5, 5).map(str), st.builds(_toml_string, _TEXT, st.integers(0, 3))))
    inner = draw(_toml_value(levels - 1))
    siblings = [draw(_toml_value(draw(st.integers(0, min(levels - 1, 1))))) for _ in range(draw(st.integers(0, 1)))]
    if draw(st.booleans()):
        sep = draw(st.sampled_from([", ", ",\n", ", # ]]] {{ '\n"]))
        return "[" + sep.join([inner, *siblings]) + "]"
    keys = [_toml_key(k, draw(st.integers(0, 2))) for k in draw(st.lists(_KEYS, min_size=1, max_size=3))]
    pairs = [f"{'.'.join(keys)} = {inner}", *(f"s{i} = {v}" for i, v in enumerate(siblings))]
    return "{" + ", ".join(pairs) + "}"


@given(
    header=st.lists(st.sampled_from(["h", "'h.i'", '"[h]"']), max_size=6),
    array_of_tables=st.booleans(),
    key=st.lists(st.sampled_from(["x", '"x.y"', "'#'"]), min_size=1, max_size=4),
    value=st.integers(18, 34).flatmap(_toml_value),
)
@settings(max_examples=100, deadline=None)
def test_the_nesting_scan_agrees_with_the_parser(
    header: list[str], array_of_tables: bool, key: list[str], value: str
) -> None:
    head = ("[[{}]]\n" if array_of_tables else "[{}]\n").format(".".join(header)) if header else ""
    text = f"{head}{'.'.join(key)} = {value}  # [[[\n"
    try:
        depth = _depth(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return  # the generator defined a key twice: not TOML
    with pytest.raises(SuiteError) as info:
        parse_suite(text)  # no [suite]: refused for that when not for its depth
    assert ("levels deep" in info.value.detail) == (depth > MAX_NESTING), (depth, info.value.detail, text)


# --- selection -------------------------------------------------------------------------------------


def test_select_cases() -> None:
    suite = parse_suite(SUITE_EXAMPLE)
    exact = "prefill[backend=flash,seq_q=2048,pass=fwd]"
    assert [c.id for c in select_cases(suite, [exact])] == [exact]
    fwd_bwd = select_cases(suite, ["*pass=fwd_bwd]"])
    assert len(fwd_bwd) == 8 and all(c.pass_ == "fwd_bwd" for c in fwd_bwd)
    cudnn = select_cases(suite, ["prefill[backend=cudnn,*"])
    assert [c.backend for c in cudnn] == ["cudnn"] * 4
    assert len(select_cases(suite, ["prefill"])) == 16
    # Suite order and no duplicates, whatever the order and overlap of the patterns.
    both = select_cases(suite, ["my-kernel", "prefill[backend=math,*", "*math*"])
    assert [c.id for c in both] == [c.id for c in suite.cases if c.backend == "math"] + ["my-kernel"]
    assert select_cases(suite, []) == suite.cases
    assert [c.id for c in select_cases(suite, "my-?ernel")] == ["my-kernel"]


def test_select_cases_pattern_matching_nothing() -> None:
    suite = parse_suite(SUITE_EXAMPLE)
    with pytest.raises(SuiteError, match="no case matches 'decode\\*'"):
        select_cases(suite, ["prefill*", "decode*"])
    # Brackets are literal, not fnmatch character classes.
    with pytest.raises(SuiteError):
        select_cases(suite, ["prefill[bc]*"])


# --- files -----------------------------------------------------------------------------------------


def test_load_suite_hashes_the_bytes_read(tmp_path: Path) -> None:
    path = tmp_path / "attnprof.toml"
    path.write_bytes(SUITE_EXAMPLE.encode())
    suite = load_suite(path)
    assert suite.source == str(path)
    assert suite.source_sha256 == hashlib.sha256(SUITE_EXAMPLE.encode()).hexdigest()
    assert suite.source_sha256 == parse_suite(SUITE_EXAMPLE).source_sha256
    assert len(suite.cases) == 17


def test_load_suite_unreadable_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(SuiteError) as info:
        load_suite(missing)
    assert str(missing) in str(info.value) and "cannot read" in str(info.value)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SuiteError, match="not UTF-8"):
        load_suite(binary)


def test_load_suite_errors_carry_the_path(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(one_case("hed_dim = 1\n"))
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path}: cases[0].hed_dim")


def test_example_llama7b() -> None:
    suite = load_suite(EXAMPLES / "llama7b.toml")
    assert suite.name == "llama7b"
    prefill = [c for c in suite.cases if not c.name.startswith("decode")]
    decode = [c for c in suite.cases if c.name.startswith("decode")]
    assert len(prefill) == 4 * 2 + 2 + 2 + 2 + 1
    for case in prefill:
        assert (case.batch, case.q_heads, case.kv_heads, case.seq_q, case.head_dim) == (1, 32, 32, 2048, 128)
        assert case.dtype == "bf16" and case.causal
    assert {c.backend for c in prefill if c.target == "sdpa"} == {"cudnn", "flash", "efficient", "math"}
    assert [c.pass_ for c in suite.cases if c.target == "block"] == ["fwd"]
    # decode: one query against KV caches of 4k-32k, GQA 8:1 and MQA, batch 1 and 16, no mask needed
    assert len(decode) == 2 * 2 * 2 + 2
    assert {c.seq_q for c in decode} == {1} and {c.seq_kv for c in decode} == {4096, 16384, 32768}
    assert {c.q_heads // c.kv_heads for c in decode} == {8, 32} and {c.batch for c in decode} == {1, 16}
    assert not any(c.causal for c in decode) and {c.backend for c in decode} == {"cudnn", "flash"}


def test_example_cpu_smoke() -> None:
    suite = load_suite(EXAMPLES / "cpu.toml")
    assert suite.name == "cpu-smoke"
    assert suite.timing == TimingConfig(warmup=3, min_samples=10, max_samples=200, budget_s=0.3)
    assert suite.thresholds.latency == 0.25
    assert all(c.dtype == "fp32" for c in suite.cases)
    assert {c.target for c in suite.cases} == {"sdpa", "naive", "block"}
    assert any(c.seq_q == 64 and c.seq_kv == 256 for c in suite.cases)
    assert {c.pass_ for c in suite.cases} == {"fwd", "fwd_bwd"}
    # CPU keeps shapes small: no case's score matrix above a million elements.
    assert max(c.batch * c.q_heads * c.seq_q * c.seq_kv for c in suite.cases) <= 1 << 20


def test_case_spec_is_frozen() -> None:
    case: CaseSpec = parse_suite(one_case("")).cases[0]
    with pytest.raises(AttributeError):
        case.id = "x"  # type: ignore[misc]


def test_causal_with_more_queries_than_keys_is_refused_naming_seq_q() -> None:
    err = reject(one_case("seq_kv = 64\ncausal = true\n"))
    assert err.key == "cases[0].seq_q"
    assert "seq_q (128) <= seq_kv (64)" in str(err) and "bottom-right" in str(err)
    # decode: one query against a long cache, causal or not, is fine
    assert parse_suite(one_case("seq_kv = 4096\ncausal = true\n").replace("seq_q = 128", "seq_q = 1")).cases
