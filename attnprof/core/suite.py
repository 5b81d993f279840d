"""The suite file (docs/architecture.md, "Suite file"): parse, validate and expand it into cases. Torch-free.

A suite file is TOML with a ``[suite]`` table and one or more ``[[cases]]``::

    [suite]
    name = "llama7b"                       # required
    thresholds = { latency = 0.02 }        # optional: minimum effects and the FDR level
    [suite.timing]                         # optional: see TimingConfig
    budget_s = 1.0
    testbeds = ["h100", "h200"]            # optional: the testbeds a submission to the service runs on, one job each
    [suite.advice]                         # optional: rules not to try (attnprof.core.measure.advice)
    off = ["head_dim"]                     # any of backend, mask, contiguous, head_dim, gqa, sdpa, output; or "all"

    [[cases]]
    name = "prefill"                       # required
    target = "sdpa"                        # required: a built-in or "package.module:factory"
    backends = ["cudnn", "flash"]          # sdpa only
    q_heads = 32
    seq_q = [512, 2048]
    head_dim = 128
    pass = ["fwd", "fwd_bwd"]

Every problem raises :class:`SuiteError` whose ``key`` is the dotted path of the offending key
(``suite.timing.budget_s``, ``cases[2].hed_dim``; case indices count from 0, in file order) and
whose message says what is allowed; unknown keys get the closest known key suggested.

Case keys
    ``name``, ``target`` (required); ``batch`` (default 1), ``q_heads``, ``kv_heads`` (default:
    ``q_heads``), ``seq_q``, ``seq_kv`` (default: ``seq_q``), ``head_dim``, ``dtype`` (``fp32``,
    ``fp16``, ``bf16``; default ``bf16``), ``causal`` (default false), ``pass`` (``fwd`` or
    ``fwd_bwd``; default ``fwd``), ``thresholds`` (a table, merged over the suite's: the case wins).
    ``q_heads``, ``seq_q`` and ``head_dim`` are required for built-in targets and optional for a
    custom one (its factory may not be attention at all; where all three are given, FLOPs and
    bytes come from the attention formulas: see :attr:`CaseSpec.has_shape`).
    Target-specific: ``backends`` (``sdpa``; a string or a list of ``cudnn``, ``flash``,
    ``efficient``, ``math``, ``default``; ``backend`` is accepted as a synonym, not both; default
    ``default``), ``window`` (``flex``; optional sliding window: a query sees keys fewer than
    ``window`` positions behind it), ``ffn_hidden`` (``block``; default ``4 * q_heads * head_dim``,
    which matches the FLOPs of a LLaMA-style SwiGLU FFN of width 8/3 of that), ``args`` (custom
    targets only; a table passed through to the factory unchanged, copied per case).

Grids
    Any value except ``name``, ``target``, ``args`` and ``thresholds`` may be a list (non-empty,
    no duplicates). Lists expand to the cartesian product, the first list-valued key in the file
    varying slowest. A one-element list is still a grid key: it shows in the id, so an id stays
    the same when more values are added later.

Case ids
    ``name``, then ``[key=value,...]`` over the list-valued keys in file order (``backends`` shown
    as ``backend``, booleans as ``true``/``false``): ``prefill[backend=cudnn,seq_q=512,pass=fwd]``.
    A case without lists has its bare name. Ids must be unique across the suite. Names may not
    contain ``[ ] , =`` (they delimit ids), ``* ?`` (wildcards of :func:`select_cases`), ``/`` or
    ``\\`` (ids end up in URL paths and file names), control characters, or surrounding spaces.

Impossible values (suite errors)
    integers that are not integers (``true``, ``512.0``), or below 1; ``head_dim`` above 512;
    any dimension of 2**31 or more; ``kv_heads`` above ``q_heads`` or not dividing it; a dtype,
    pass or backend outside its set; a ``causal`` that is not a boolean; a score matrix
    ``batch * q_heads * seq_q * seq_kv`` above 2**40 elements (a sanity bound: 2 TiB in bf16);
    ``seq_kv`` different from ``seq_q`` for ``block`` (it is self-attention); ``causal`` with ``seq_q``
    above ``seq_kv`` (bottom-right alignment leaves the first queries no key); ``args`` on a built-in
    target; TOML dates or non-finite floats in ``args`` (params are stored as JSON); more than
    :data:`MAX_CASES` expanded cases or a file above :data:`MAX_SUITE_BYTES` (inputs are bounded);
    anything nested more than :data:`MAX_NESTING` levels deep, where each key and each array index on the
    path to a value is one level (``cases[0].args.x`` is four): arrays and inline tables, dotted keys and
    table headers are counted in the text before it is parsed, since the TOML parser recurses once per
    nested array or inline table and slows down with the square of a dotted key's length.

Run-time eligibility (not suite errors)
    Whether a case can run is PyTorch's and the device's decision, made when it runs and recorded
    as ``skipped`` or ``failed`` in the result, so one suite serves every testbed: a backend the
    device or build lacks (flash, efficient and cuDNN on CPU; cuDNN attention on older GPUs),
    backend and dtype (flash or cuDNN with fp32), backend and head size (flash above 256, alignment
    rules of efficient and cuDNN), GQA (``kv_heads < q_heads``) on a backend without it, FlexAttention
    restrictions and compile failures, causal cross-attention on a backend without a bottom-right
    mask (the causal mask is aligned bottom-right, as with a KV cache: query ``i`` sees keys up to
    ``i + seq_kv - seq_q``; PyTorch's own ``is_causal`` aligns top-left), a ``window`` wider than
    ``seq_kv`` (plain attention), and running out
    of memory.

Timing (``[suite.timing]``)
    See :class:`TimingConfig`; bounded so a typo cannot make a CI job run for hours.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import hashlib
import itertools
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from attnprof.core.documents import Thresholds
from attnprof.core.documents.result import ADVICE_RULES
from attnprof.core.errors import SuiteError

TARGETS: tuple[str, ...] = ("sdpa", "flex", "naive", "compiled_naive", "block")
BACKENDS: tuple[str, ...] = ("cudnn", "flash", "efficient", "math", "default")
DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16")
PASSES: tuple[str, ...] = ("fwd", "fwd_bwd")

# Stricter than "[\w.]*" on purpose: every dotted segment must be an identifier, since "a..b" or
# "a.:f" could never be imported and would only fail later, on the GPU host.
CUSTOM_TARGET_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

MAX_SUITE_BYTES = 1 << 20
MAX_CASES = 2048
MAX_SCORE_ELEMENTS = 2**40
MAX_HEAD_DIM = 512
MAX_DIM = 2**31 - 1
MAX_NAME_CHARS = 100
MAX_TARGET_CHARS = 200
MAX_NESTING = 32

_NAME_FORBIDDEN = "[],=*?/\\"
_SHAPE_KEYS = ("batch", "q_heads", "kv_heads", "seq_q", "seq_kv", "head_dim")
_INT_KEYS = (*_SHAPE_KEYS, "window", "ffn_hidden")
_REQUIRED_BUILTIN = ("q_heads", "seq_q", "head_dim")
_COMMON_KEYS = ("name", "target", *_SHAPE_KEYS, "dtype", "causal", "pass", "thresholds")
_TARGET_KEYS: dict[str, tuple[str, ...]] = {
    "sdpa": ("backends",),
    "flex": ("window",),
    "block": ("ffn_hidden",),
}
_KEY_OWNER = {"backends": "sdpa", "backend": "sdpa", "window": "flex", "ffn_hidden": "block"}
_NOT_EXPANDABLE = ("name", "target", "args", "thresholds")
_SUITE_KEYS = ("name", "thresholds", "timing", "advice", "testbeds")
# A testbed's name becomes a queue name on the service (``profile.<testbed>``): the service's own rule, restated here
# since the profiler core imports nothing of the service, so that a suite naming a bad one is refused before upload.
TESTBED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_TESTBEDS = 8
_THRESHOLD_KEYS: tuple[str, ...] = tuple(Thresholds.model_fields)

# The paired run's defaults per case (TimingConfig): a budget of device time in units of the case's unpaired rounds,
# a floor and a ceiling in pairs, and a bound on warm-up rounds. Chosen on the H200 recordings' pair spreads so that
# a 1% change settles at the defaults (docs/regression-method.md; bench/paired_budget.py reproduces the figures).
PAIRED_BUDGET = 6.0
PAIRED_FLOOR_PAIRS = 16
PAIRED_MAX_PAIRS = 40
PAIRED_WARMUP_ROUNDS = 6


@dataclass(frozen=True)
class TimingConfig:
    """How long each case is timed (``[suite.timing]``).

    The timed loop stops at ``max_samples``, or once it holds at least ``min_samples`` and either
    ``budget_s`` of wall time is spent or the 95% confidence interval of the median is narrower
    than ``target_rel_ci`` of the median on each side. Those samples are taken in ``rounds`` passes
    over the suite (each case built again in each pass, with its share of the samples and budget):
    a GPU's speed drifts by 0.5-1.5% over seconds, so the medians of samples taken in one stretch
    of time differ by that much from process to process while each looks precise
    (``bench/reports/h200-truth.md``). Values out of range raise :class:`SuiteError` with ``key``
    ``suite.timing.<field>``.
    """

    warmup: int = 10
    min_samples: int = 30
    max_samples: int = 1000
    budget_s: float = 2.0
    target_rel_ci: float = 0.005
    trace_iters: int = 3
    rounds: int = 5
    # A paired run (``attnprof paired``, a paired job): what one case may spend. Its pairs, warm-up pairs included, may
    # take ``paired_budget`` times the device time of its ``rounds`` in an unpaired profile, at least
    # ``paired_floor_pairs`` and at most ``paired_max_pairs`` pairs counted; before them, at most
    # ``paired_warmup_rounds`` warm-up rounds per side until the rounds agree. Why these defaults:
    # docs/regression-method.md, "Paired comparisons" (bench/paired_budget.py).
    paired_budget: float = PAIRED_BUDGET
    paired_floor_pairs: int = PAIRED_FLOOR_PAIRS
    paired_max_pairs: int = PAIRED_MAX_PAIRS
    paired_warmup_rounds: int = PAIRED_WARMUP_ROUNDS

    def __post_init__(self) -> None:
        def bad(name: str, message: str) -> SuiteError:
            return SuiteError(message, key=f"suite.timing.{name}")

        for name in (
            "warmup",
            "min_samples",
            "max_samples",
            "trace_iters",
            "rounds",
            "paired_floor_pairs",
            "paired_max_pairs",
            "paired_warmup_rounds",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, f"{name} must be an integer, got {_show(value)}")
        for name in ("budget_s", "target_rel_ci", "paired_budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise bad(name, f"{name} must be a finite number, got {_show(value)}")
        # Upper bounds keep one case from holding a GPU worker for more than minutes.
        if not 0 <= self.warmup <= 10_000:
            raise bad("warmup", f"warmup must be in 0..10000 untimed iterations, got {self.warmup}")
        if not 3 <= self.min_samples <= 100_000:
            raise bad("min_samples", f"min_samples must be in 3..100000, got {self.min_samples}")
        if not self.min_samples <= self.max_samples <= 100_000:
            raise bad(
                "max_samples",
                f"max_samples ({self.max_samples}) must be >= min_samples ({self.min_samples}) and <= 100000",
            )
        if not 0 < self.budget_s <= 600:
            raise bad("budget_s", f"budget_s must be > 0 and <= 600 seconds per case, got {self.budget_s}")
        if not 0 < self.target_rel_ci < 1:
            raise bad("target_rel_ci", f"target_rel_ci must be in (0, 1), e.g. 0.005, got {self.target_rel_ci}")
        if not 1 <= self.trace_iters <= 50:
            raise bad("trace_iters", f"trace_iters must be in 1..50, got {self.trace_iters}")
        if not 1 <= self.rounds <= 20:
            raise bad("rounds", f"rounds must be in 1..20 passes over the suite, got {self.rounds}")
        if not 0 < self.paired_budget <= 100:
            raise bad(
                "paired_budget",
                f"paired_budget must be > 0 and <= 100 times a case's unpaired rounds, got {self.paired_budget}",
            )
        if not 4 <= self.paired_max_pairs <= 1000:
            raise bad("paired_max_pairs", f"paired_max_pairs must be in 4..1000 pairs, got {self.paired_max_pairs}")
        if not 4 <= self.paired_floor_pairs <= self.paired_max_pairs:
            raise bad(
                "paired_floor_pairs",
                f"paired_floor_pairs ({self.paired_floor_pairs}) must be >= 4 and <= paired_max_pairs "
                f"({self.paired_max_pairs})",
            )
        if not 2 <= self.paired_warmup_rounds <= 50:
            raise bad(
                "paired_warmup_rounds",
                f"paired_warmup_rounds must be in 2..50 rounds per side (two to see them agree), got "
                f"{self.paired_warmup_rounds}",
            )

    @property
    def effective_rounds(self) -> int:
        """``rounds``, or fewer where ``min_samples`` cannot give each round at least 3 samples."""
        return max(1, min(self.rounds, self.min_samples // 3))

    def round_config(self) -> TimingConfig:
        """The share of one round: samples and budget divided among the rounds; the precision asked of a round's own
        median is ``target_rel_ci`` times the square root of the rounds, so the pooled median's is about the target."""
        rounds = self.effective_rounds
        if rounds == 1:
            return dataclasses.replace(self, rounds=1)
        return dataclasses.replace(
            self,
            min_samples=math.ceil(self.min_samples / rounds),
            max_samples=math.ceil(self.max_samples / rounds),
            budget_s=self.budget_s / rounds,
            target_rel_ci=min(0.5, self.target_rel_ci * math.sqrt(rounds)),
            rounds=1,
        )

    def paired_round_config(self) -> TimingConfig:
        """A round of a paired run: half the samples and budget of ``round_config``, so that one pair (a base round
        and a head round) takes what one round of a profile run takes."""
        one = self.round_config()
        least = max(3, math.ceil(one.min_samples / 2))
        return dataclasses.replace(
            one,
            min_samples=least,
            max_samples=max(least, math.ceil(one.max_samples / 2)),
            budget_s=one.budget_s / 2,
            target_rel_ci=min(0.5, one.target_rel_ci * math.sqrt(2)),
        )


@dataclass(frozen=True)
class CaseSpec:
    """One expanded case: a single point of its grid, with every default filled in.

    ``params`` holds, in this order, ``batch``, ``q_heads``, ``kv_heads``, ``seq_q``, ``seq_kv``,
    ``head_dim``, ``dtype``, ``causal``, ``pass``, then ``backend`` (sdpa), ``window`` (flex, when
    given), ``ffn_hidden`` (block) and ``args`` (custom, when given). A custom case lacks the
    shape keys it did not give; reading such a property raises :class:`ValueError`.
    """

    id: str
    name: str
    target: str
    params: dict[str, Any]
    thresholds: Thresholds
    grid: dict[str, Any]

    def _int(self, key: str) -> int:
        value = self.params.get(key)
        if value is None:
            raise ValueError(f"case {self.id!r} (target {self.target}) has no {key}")
        return int(value)

    @property
    def batch(self) -> int:
        """Batch size."""
        return self._int("batch")

    @property
    def q_heads(self) -> int:
        """Number of query heads."""
        return self._int("q_heads")

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (below ``q_heads`` for GQA/MQA)."""
        return self._int("kv_heads")

    @property
    def seq_q(self) -> int:
        """Query sequence length."""
        return self._int("seq_q")

    @property
    def seq_kv(self) -> int:
        """Key/value sequence length."""
        return self._int("seq_kv")

    @property
    def head_dim(self) -> int:
        """Head dimension."""
        return self._int("head_dim")

    @property
    def dtype(self) -> str:
        """``fp32``, ``fp16`` or ``bf16``."""
        return str(self.params["dtype"])

    @property
    def causal(self) -> bool:
        """Whether the attention is causal."""
        return bool(self.params["causal"])

    @property
    def pass_(self) -> str:
        """``fwd`` or ``fwd_bwd`` (the ``pass`` parameter)."""
        return str(self.params["pass"])

    @property
    def backend(self) -> str | None:
        """The SDPA backend requested, or ``None`` for other targets."""
        value = self.params.get("backend")
        return None if value is None else str(value)

    @property
    def is_custom(self) -> bool:
        """Whether the target is a user factory (``package.module:factory``)."""
        return self.target not in TARGETS

    @property
    def has_shape(self) -> bool:
        """Whether ``q_heads``, ``seq_q`` and ``head_dim`` are known (always, for built-ins)."""
        return all(k in self.params for k in ("q_heads", "seq_q", "head_dim"))


@dataclass(frozen=True)
class Suite:
    """A parsed suite: its cases in file order, grids expanded."""

    name: str
    thresholds: Thresholds
    timing: TimingConfig
    cases: list[CaseSpec]
    source: str
    source_sha256: str
    advice_off: tuple[str, ...] = ()
    """The advice rules switched off (``[suite.advice] off``; ``attnprof.core.measure.advice``)."""
    testbeds: tuple[str, ...] = ()
    """The testbeds a submission of this suite runs on when it names none, one job each (``[suite] testbeds``;
    empty: the submission names its testbed). The profiler itself never reads it."""


def parse_suite(text: str, *, source: str = "<string>") -> Suite:
    """Parse suite TOML from a string; ``source`` names it in error messages."""
    raw = text.encode("utf-8", errors="surrogatepass")
    return _parse(text, source, hashlib.sha256(raw).hexdigest(), len(raw))


def load_suite(path: str | Path) -> Suite:
    """Read and parse a suite file; ``source_sha256`` hashes the bytes as read."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            # One byte past the limit is enough to know the file is too large without reading it all.
            raw = fh.read(MAX_SUITE_BYTES + 1)
    except OSError as exc:
        raise SuiteError(f"cannot read the suite file: {exc.strerror or exc}", source=str(p)) from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"not UTF-8 text (bad byte at offset {exc.start})", source=str(p)) from exc
    return _parse(text, str(p), hashlib.sha256(raw).hexdigest(), len(raw))


def select_cases(suite: Suite, patterns: Sequence[str]) -> list[CaseSpec]:
    """The cases whose id or name matches any of ``patterns``, in suite order.

    Patterns are shell-style with ``*`` and ``?`` as the only wildcards: ``[`` and ``]`` are
    literal, because every grid id contains them (``prefill[backend=cudnn,*``). A pattern also
    matches a case's name, so ``prefill`` selects the whole ``prefill`` grid. No patterns select
    every case; a pattern that matches nothing raises :class:`SuiteError`.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        return list(suite.cases)
    chosen: set[str] = set()
    for pattern in patterns:
        rx = _glob(pattern)
        hits = {c.id for c in suite.cases if rx.fullmatch(c.id) or rx.fullmatch(c.name)}
        if not hits:
            ids = [c.id for c in suite.cases]
            shown = ", ".join(ids[:10]) + (f", ... ({len(ids) - 10} more)" if len(ids) > 10 else "")
            raise SuiteError(f"no case matches {pattern!r}; the ids are: {shown}", source=suite.source)
        chosen |= hits
    return [c for c in suite.cases if c.id in chosen]


def _glob(pattern: str) -> re.Pattern[str]:
    parts = (".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts), re.DOTALL)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _one_of(choices: Sequence[str]) -> str:
    return ", ".join(repr(c) for c in choices)


class _Ctx:
    """Carries the source name so every error can say which file it is about."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, message: str, key: str | None = None) -> SuiteError:
        return SuiteError(message, key=key, source=self.source)

    def unknown(self, key: str, path: str, allowed: Sequence[str], what: str) -> SuiteError:
        return self.error(f"unknown key {key!r}{_suggest(key, allowed)}; {what} allows: {', '.join(allowed)}", path)


def _parse(text: str, source: str, sha256: str, size: int) -> Suite:
    ctx = _Ctx(source)
    if size > MAX_SUITE_BYTES:
        raise ctx.error(f"the suite file is larger than {MAX_SUITE_BYTES} bytes")
    _check_nesting(ctx, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ctx.error(f"invalid TOML: {exc}") from exc

    for key in doc:
        if key not in ("suite", "cases"):
            raise ctx.unknown(key, key, ("suite", "cases"), "the top level")
    table = doc.get("suite")
    if table is None:
        raise ctx.error('missing the [suite] table (it needs at least name = "...")', "suite")
    if not isinstance(table, dict):
        raise ctx.error(f"suite must be a table ([suite]), got {_show(table)}", "suite")
    for key in table:
        if key not in _SUITE_KEYS:
            raise ctx.unknown(key, f"suite.{key}", _SUITE_KEYS, "[suite]")
    if "name" not in table:
        raise ctx.error("missing required key 'name'", "suite.name")
    name = _check_label(ctx, table["name"], "suite.name", forbidden="")
    suite_thresholds = _thresholds(ctx, table.get("thresholds", {}), "suite.thresholds")
    timing = _timing(ctx, table.get("timing", {}))
    advice_off = _advice(ctx, table.get("advice", {}))
    testbeds = _testbeds(ctx, table.get("testbeds", []))

    raw_cases = doc.get("cases")
    if raw_cases is None:
        raise ctx.error("no [[cases]]: a suite needs at least one case", "cases")
    if not isinstance(raw_cases, list) or not all(isinstance(c, dict) for c in raw_cases):
        raise ctx.error("cases must be an array of tables ([[cases]])", "cases")
    if not raw_cases:
        raise ctx.error("cases is empty: a suite needs at least one case", "cases")

    cases: list[CaseSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_cases):
        for case in _expand(ctx, index, raw, suite_thresholds, MAX_CASES - len(cases)):
            if case.id in seen:
                raise ctx.error(
                    f"duplicate case id {case.id!r}: cases[{seen[case.id]}] already produces it; "
                    "give the cases different names",
                    f"cases[{index}].name",
                )
            seen[case.id] = index
            cases.append(case)
    return Suite(
        name=name,
        thresholds=Thresholds(**suite_thresholds),
        timing=timing,
        cases=cases,
        source=source,
        source_sha256=sha256,
        advice_off=advice_off,
        testbeds=testbeds,
    )


# What matters to nesting in TOML text: string openings (skipped whole), comments, brackets, braces, dots,
# "=", "," and line ends. Bare keys, numbers, dates and booleans are never looked at.
_TOKEN = re.compile(r'"""|\'\'\'|["\'#\[\]{}=,.\n]')
# The rest of a string after its opening quotes, as tomllib reads it: a multi-line string ends at the first
# unescaped triple quote, plus at most two more quotes that belong to its text.
_STRING_REST = {
    '"': re.compile(r'(?:[^"\\\n]|\\.)*"'),
    "'": re.compile(r"[^'\n]*'"),
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*""""{0,2}', re.DOTALL),
    "'''": re.compile(r"(?:[^']|'(?!''))*''''{0,2}", re.DOTALL),
}


def _check_nesting(ctx: _Ctx, text: str) -> None:
    """Refuse ``text`` if a value in it lies more than :data:`MAX_NESTING` levels deep, before tomllib reads it.

    A level is a key or an array index on the path to a value (``cases[0].args.x`` is four deep): the segments
    of the current ``[table]`` header (``[[array]]`` adds its index), of a dotted key, and every array and
    inline table on the way. The scan follows tomllib's strings and comments, so a bracket inside either is
    no bracket; on text that is not TOML it stops or overcounts only past the point where tomllib fails.
    """
    frames: list[tuple[str, int]] = []  # the open "[" and "{", each with the depth of what it holds
    table = 0  # depth of the table the last [header] opened
    mode = "key"  # "key", "header", "value", or "done" (a value or header was read; "," or a line end follows)
    dots = 0  # dots seen in the current key or header
    value = 0  # depth of the value being read
    pos = 0

    def too_deep(what: str, at: int) -> SuiteError:
        line = text.count("\n", 0, at) + 1
        return ctx.error(
            f"line {line}: {what} nested more than {MAX_NESTING} levels deep; at most {MAX_NESTING} are allowed "
            "(each key and each array index on the path to a value is a level)"
        )

    while match := _TOKEN.search(text, pos):
        token, pos = match.group(), match.end()
        if token in _STRING_REST:
            rest = _STRING_REST[token].match(text, pos)
            if rest is None:
                return  # an unterminated string: tomllib says where
            pos = rest.end()
        elif token == "#":
            pos = text.find("\n", pos)
            if pos < 0:
                return
        elif token == "\n":
            if not frames:
                mode, dots = "key", 0
        elif token == "." and mode in ("key", "header"):
            dots += 1
            base = 0 if mode == "header" else frames[-1][1] if frames else table
            if base + dots + 1 > MAX_NESTING:
                raise too_deep("a table header is" if mode == "header" else "a key is", match.start())
        elif token == "=" and mode == "key":
            base = frames[-1][1] if frames else table
            value = base + dots + 1
            if value > MAX_NESTING:
                deep_tables = frames and base + 1 > MAX_NESTING
                raise too_deep("arrays and inline tables are" if deep_tables else "a key is", match.start())
            mode = "value"
        elif token == "[" and mode == "key" and not frames:
            mode, dots = "header", 0
            if text.startswith("[", pos):  # [[array of tables]]: each table is an index deeper
                pos += 1
                dots = 1
        elif token == "]" and mode == "header":
            table, mode = dots + 1, "done"
            pos += 1 if text.startswith("]", pos) else 0
        elif token == "[" and mode == "value":
            value += 1
            if value > MAX_NESTING:
                raise too_deep("arrays and inline tables are", match.start())
            frames.append(("[", value))
        elif token == "{" and mode == "value":
            frames.append(("{", value))
            mode, dots = "key", 0
        elif token in "]}" and frames and frames[-1][0] == ("[" if token == "]" else "{"):
            frames.pop()
            mode = "done"
        elif token == "," and frames:
            if frames[-1][0] == "[":
                mode, value = "value", frames[-1][1]
            else:
                mode, dots = "key", 0


def _check_label(ctx: _Ctx, value: Any, path: str, *, forbidden: str) -> str:
    key = path.rsplit(".", 1)[-1]
    if not isinstance(value, str) or not value.strip():
        raise ctx.error(f"{key} must be a non-empty string, got {_show(value)}", path)
    if len(value) > MAX_NAME_CHARS:
        raise ctx.error(f"{key} must be at most {MAX_NAME_CHARS} characters, got {len(value)}", path)
    if value != value.strip():
        raise ctx.error(f"{key} {value!r} must not start or end with whitespace", path)
    if not value.isprintable():
        raise ctx.error(f"{key} {value!r} must not contain control characters", path)
    bad = sorted({ch for ch in value if ch in forbidden})
    if bad:
        raise ctx.error(
            f"{key} {value!r} must not contain {' '.join(bad)} (no name may contain {' '.join(forbidden)})",
            path,
        )
    return value


def _number(ctx: _Ctx, value: Any, path: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.error(f"{key} must be a number, got {_show(value)}", path)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ctx.error(f"{key} must be a finite number, got {_show(value)}", path)
    return number


def _thresholds(ctx: _Ctx, table: Any, path: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ctx.error(f"thresholds must be a table (e.g. {{ latency = 0.02 }}), got {_show(table)}", path)
    out: dict[str, float] = {}
    for key, value in table.items():
        kpath = f"{path}.{key}"
        if key not in _THRESHOLD_KEYS:
            raise ctx.unknown(key, kpath, _THRESHOLD_KEYS, "thresholds")
        number = _number(ctx, value, kpath, key)
        if key == "fdr":
            if not 0 < number < 1:
                raise ctx.error(f"fdr must be in (0, 1), e.g. 0.05, got {_show(value)}", kpath)
        elif number < 0:
            raise ctx.error(f"{key} must be >= 0 (a relative change: 0.02 is 2%), got {_show(value)}", kpath)
        out[key] = number
    try:
        Thresholds(**out)
    except ValidationError as exc:  # only if the model gains constraints this module does not know
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ctx.error(err["msg"], f"{path}.{loc}" if loc else path) from exc
    return out


def _advice(ctx: _Ctx, table: Any) -> tuple[str, ...]:
    """``[suite.advice] off = ["mask", ...]``: the rules not to try (``"all"`` for every one)."""
    if not isinstance(table, dict):
        raise ctx.error(f"advice must be a table ([suite.advice]), got {_show(table)}", "suite.advice")
    for key in table:
        if key != "off":
            raise ctx.unknown(key, f"suite.advice.{key}", ("off",), "[suite.advice]")
    off = table.get("off", [])
    choices = (*ADVICE_RULES, "all")
    if not isinstance(off, list) or not all(isinstance(r, str) and r in choices for r in off):
        raise ctx.error(
            f"off must be a list of rules, each one of {_one_of(choices)}, got {_show(off)}", "suite.advice.off"
        )
    return ADVICE_RULES if "all" in off else tuple(dict.fromkeys(off))


def _testbeds(ctx: _Ctx, value: Any) -> tuple[str, ...]:
    """``[suite] testbeds = ["h100", "h200"]``: distinct testbed names, at most ``MAX_TESTBEDS``."""
    path = "suite.testbeds"
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ctx.error(f"testbeds must be a list of testbed names, got {_show(value)}", path)
    if len(value) > MAX_TESTBEDS:
        raise ctx.error(f"testbeds names at most {MAX_TESTBEDS} testbeds, got {len(value)}", path)
    for name in value:
        if not TESTBED_NAME.fullmatch(name):
            raise ctx.error(
                f"testbed {name!r}: letters, digits, '.', '_' and '-', starting with a letter or digit, "
                "at most 100 characters",
                path,
            )
    repeated = sorted({t for t in value if value.count(t) > 1})
    if repeated:
        raise ctx.error(f"testbeds names {', '.join(map(repr, repeated))} more than once", path)
    return tuple(value)


def _timing(ctx: _Ctx, table: Any) -> TimingConfig:
    if not isinstance(table, dict):
        raise ctx.error(f"timing must be a table ([suite.timing]), got {_show(table)}", "suite.timing")
    fields = tuple(f.name for f in dataclasses.fields(TimingConfig))
    values: dict[str, Any] = {}
    for key, value in table.items():
        path = f"suite.timing.{key}"
        if key not in fields:
            raise ctx.unknown(key, path, fields, "[suite.timing]")
        if key in ("budget_s", "target_rel_ci", "paired_budget"):
            values[key] = _number(ctx, value, path, key)
        else:
            values[key] = value
    try:
        return TimingConfig(**values)
    except SuiteError as exc:
        raise ctx.error(exc.detail, exc.key) from exc


def _check_value(ctx: _Ctx, param: str, value: Any, path: str) -> None:
    key = path.rsplit(".", 1)[-1]
    if param in _INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int):
            integral = isinstance(value, float) and value.is_integer()
            hint = f" (write {int(value)}, not {value!r})" if integral else ""
            raise ctx.error(f"{key} must be an integer >= 1, got {_show(value)}{hint}", path)
        if value < 1:
            raise ctx.error(f"{key} must be >= 1, got {value}", path)
        if value > MAX_DIM:
            raise ctx.error(f"{key} must be below 2**31, got {value}", path)
        if param == "head_dim" and value > MAX_HEAD_DIM:
            raise ctx.error(f"head_dim must be <= {MAX_HEAD_DIM}, got {value}", path)
    elif param == "causal":
        if not isinstance(value, bool):
            raise ctx.error(f"causal must be true or false, got {_show(value)}", path)
    else:
        choices = {"dtype": DTYPES, "pass": PASSES, "backend": BACKENDS}[param]
        if not isinstance(value, str) or value not in choices:
            hint = _suggest(value, choices) if isinstance(value, str) else ""
            raise ctx.error(f"{key} must be one of {_one_of(choices)}, got {_show(value)}{hint}", path)


def _check_args(ctx: _Ctx, value: Any, path: str) -> None:
    """Reject what JSON cannot carry faithfully, since params end up in the result document."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_args(ctx, v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_args(ctx, v, f"{path}[{i}]")
    elif isinstance(value, datetime.date | datetime.time):
        raise ctx.error("args cannot hold TOML dates or times (params are stored as JSON); use a string", path)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ctx.error(f"args values must be finite numbers, got {value!r}", path)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _expand(
    ctx: _Ctx, index: int, raw: Mapping[str, Any], suite_thresholds: dict[str, float], room: int
) -> list[CaseSpec]:
    here = f"cases[{index}]"
    if "name" not in raw:
        raise ctx.error("missing required key 'name'", f"{here}.name")
    name = _check_label(ctx, raw["name"], f"{here}.name", forbidden=_NAME_FORBIDDEN)
    if "target" not in raw:
        raise ctx.error(
            f"missing required key 'target' (one of {', '.join(TARGETS)}, or a custom 'package.module:factory')",
            f"{here}.target",
        )
    target = raw["target"]
    if not isinstance(target, str):
        raise ctx.error(
            f"target must be a string (one target per [[cases]] entry), got {_show(target)}", f"{here}.target"
        )
    custom = target not in TARGETS
    if custom and (len(target) > MAX_TARGET_CHARS or not CUSTOM_TARGET_RE.match(target)):
        raise ctx.error(
            f"unknown target {target!r}{_suggest(target, TARGETS)}: the built-ins are {', '.join(TARGETS)}; "
            "a custom target is written 'package.module:factory'",
            f"{here}.target",
        )

    allowed = (*_COMMON_KEYS, *_TARGET_KEYS.get(target, ()), *(("args",) if custom else ()))
    for key in raw:
        if key in allowed or (key == "backend" and target == "sdpa"):
            continue
        path = f"{here}.{key}"
        if key in _KEY_OWNER:
            raise ctx.error(f"{key!r} applies to target {_KEY_OWNER[key]} only, not {target}", path)
        if key == "args":
            raise ctx.error(
                f"'args' is passed to a custom factory ('package.module:factory') only; "
                f"the built-in target {target} takes none",
                path,
            )
        raise ctx.unknown(key, path, allowed, f"target {target}")
    if "backend" in raw and "backends" in raw:
        raise ctx.error("give either 'backends' or its synonym 'backend', not both", f"{here}.backend")
    if not custom:
        for key in _REQUIRED_BUILTIN:
            if key not in raw:
                raise ctx.error(
                    f"missing required key {key!r} (target {target} needs {', '.join(_REQUIRED_BUILTIN)})",
                    f"{here}.{key}",
                )

    axes: list[tuple[str, str, list[Any]]] = []  # (param, key as written, values)
    grid_params: list[str] = []
    for key, value in raw.items():
        if key in _NOT_EXPANDABLE:
            continue
        param = "backend" if key == "backends" else key
        path = f"{here}.{key}"
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list):
            if not value:
                raise ctx.error(f"{key} is an empty list: give at least one value", path)
            grid_params.append(param)
        for v in values:
            _check_value(ctx, param, v, path)
        seen: set[Any] = set()
        for v in values:
            if v in seen:
                raise ctx.error(f"{key} lists {_fmt(v)} twice: grid values must be distinct", path)
            seen.add(v)
        axes.append((param, key, values))

    args = raw.get("args")
    if args is not None:
        if not isinstance(args, dict):
            raise ctx.error(f"args must be a table, e.g. {{ block_n = 64 }}, got {_show(args)}", f"{here}.args")
        _check_args(ctx, args, f"{here}.args")
    merged = {**suite_thresholds, **_thresholds(ctx, raw.get("thresholds", {}), f"{here}.thresholds")}

    count = math.prod(len(values) for _, _, values in axes)
    if count > room:
        raise ctx.error(
            f"the grid of {name!r} expands to {count} cases; a suite may hold at most {MAX_CASES} in all",
            here,
        )

    written = {param: key for param, key, _ in axes}
    cases: list[CaseSpec] = []
    for combo in itertools.product(*(values for _, _, values in axes)):
        given = {param: v for (param, _, _), v in zip(axes, combo, strict=True)}
        grid = {param: given[param] for param in grid_params}
        case_id = name + ("[" + ",".join(f"{k}={_fmt(v)}" for k, v in grid.items()) + "]" if grid else "")
        params = _params(target, given, args)
        _check_case(ctx, here, target, case_id, params, written)
        thresholds = Thresholds(**merged)
        cases.append(CaseSpec(case_id, name, target, params, thresholds, grid))
    return cases


def _params(target: str, given: dict[str, Any], args: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults filled in, keys in one canonical order so result documents read alike."""
    p: dict[str, Any] = {"batch": given.get("batch", 1)}
    if "q_heads" in given:
        p["q_heads"] = given["q_heads"]
        p["kv_heads"] = given.get("kv_heads", given["q_heads"])
    elif "kv_heads" in given:
        p["kv_heads"] = given["kv_heads"]
    if "seq_q" in given:
        p["seq_q"] = given["seq_q"]
        p["seq_kv"] = given.get("seq_kv", given["seq_q"])
    elif "seq_kv" in given:
        p["seq_kv"] = given["seq_kv"]
    if "head_dim" in given:
        p["head_dim"] = given["head_dim"]
    p["dtype"] = given.get("dtype", "bf16")
    p["causal"] = given.get("causal", False)
    p["pass"] = given.get("pass", "fwd")
    if target == "sdpa":
        p["backend"] = given.get("backend", "default")
    if "window" in given:
        p["window"] = given["window"]
    if target == "block":
        p["ffn_hidden"] = given.get("ffn_hidden", 4 * p["q_heads"] * p["head_dim"])
    if args is not None:
        # Each case gets its own copy: a factory that mutates its params must not leak into the next case.
        p["args"] = copy.deepcopy(args)
    return p


def _check_case(ctx: _Ctx, here: str, target: str, case_id: str, p: dict[str, Any], written: dict[str, str]) -> None:
    """Checks that involve more than one key, on one expanded case."""
    of = f" (case {case_id!r})"
    q, kv = p.get("q_heads"), p.get("kv_heads")
    if q is not None and kv is not None:
        path = f"{here}.{written.get('kv_heads', 'kv_heads')}"
        if kv > q:
            raise ctx.error(f"kv_heads ({kv}) must not exceed q_heads ({q}){of}", path)
        if q % kv:
            raise ctx.error(f"q_heads ({q}) must be a multiple of kv_heads ({kv}){of}", path)
    if q is not None and "seq_q" in p:
        scores = p["batch"] * q * p["seq_q"] * p["seq_kv"]
        if scores > MAX_SCORE_ELEMENTS:
            raise ctx.error(
                f"the score matrix batch*q_heads*seq_q*seq_kv = {scores} elements exceeds the sanity "
                f"limit of 2**40 ({MAX_SCORE_ELEMENTS}){of}",
                here,
            )
    if p.get("causal") and "seq_q" in p and p["seq_q"] > p["seq_kv"]:
        raise ctx.error(
            f"causal attention needs seq_q ({p['seq_q']}) <= seq_kv ({p['seq_kv']}): the mask is aligned "
            f"bottom-right (the last query sees every key), so the first {p['seq_q'] - p['seq_kv']} queries "
            f"would see no key{of}",
            f"{here}.{written.get('seq_q', 'seq_q')}",
        )
    if target == "block" and p["seq_kv"] != p["seq_q"]:
        raise ctx.error(
            f"seq_kv ({p['seq_kv']}) must equal seq_q ({p['seq_q']}): block is self-attention{of}",
            f"{here}.{written.get('seq_kv', 'seq_kv')}",
        )
