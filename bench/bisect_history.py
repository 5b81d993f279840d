"""A git history for measuring ``attnprof bisect`` on a GPU: a custom attention kernel's project over ``--commits``
commits, one of which (``--culprit``) adds a small second pass over the attention's output that costs about
``--slowdown`` of the step (a pointwise rescale in fp32 and back, sized against the attention's own time).

    python -m bench.bisect_history --out DIR [--commits 16] [--culprit 9] [--slowdown 0.03]   # prints the two ends

The suite is ``perf.toml`` at the root; its one case, ``custom``, runs ``histpkg.attn:make_case``
(``bench/bisect_gpu.sh`` bisects it with ``attnprof bisect``). Every other commit changes only a notes file.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

SUITE = """[suite]
name = "history"

[[cases]]
name = "custom"
target = "histpkg.attn:make_case"
dtype = "bf16"
"""

TARGET = """import torch
import torch.nn.functional as F

# The share of the attention's work the extra pass stands for: 0 before the culprit.
EXTRA = {extra}


def make_case(params, device):
    q, k, v = (torch.randn(4, 16, 4096, 128, device=device, dtype=torch.bfloat16) for _ in range(3))
    # About EXTRA of the attention's bytes and time: the pass reads and writes a slice of the output.
    rows = max(1, int(4096 * EXTRA * 4)) if EXTRA else 0

    def fn(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if rows:
            out[:, :, :rows] = (out[:, :, :rows].float() * 1.0001).to(out.dtype)
        return out

    return {{"fn": fn, "args": (q, k, v)}}
"""


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**env, "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return done.stdout.strip()


def make(repo: Path, *, commits: int, culprit: int, slowdown: float) -> list[str]:
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "histpkg").mkdir()
    (repo / "histpkg" / "__init__.py").write_text("")
    (repo / "perf.toml").write_text(SUITE)
    shas = []
    for i in range(commits + 1):
        (repo / "histpkg" / "attn.py").write_text(TARGET.format(extra=slowdown if 0 < culprit <= i else 0.0))
        (repo / "NOTES").write_text(f"change {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return shas


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bisect_history")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commits", type=int, default=16)
    parser.add_argument("--culprit", type=int, default=9)
    parser.add_argument("--slowdown", type=float, default=0.03)
    args = parser.parse_args()
    shas = make(args.out, commits=args.commits, culprit=args.culprit, slowdown=args.slowdown)
    print(shas[0], shas[-1], shas[args.culprit])


if __name__ == "__main__":
    main()
