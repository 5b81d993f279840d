"""The host canary on each GPU measured (bench/canary_gpu.sh), as a report: each figure's spread over the repeats,
what one canary costs, whether the repeats pass the band they make (a healthy host must not quarantine itself), and
whether a canary taken beside a neighbour's copies fails it.

    python -m bench.canary_report DIR [DIR ...] --out bench/reports/canary.md

Each DIR is one ``canary-<gpu>`` folder. The band is the service's (``attnprof.server.hosts.band``) at the default
tolerances, each repeat playing a host of its own (the worst case: no host median smooths it).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from attnprof.server.config import Health
from attnprof.server.hosts import band


def _load(path: Path) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(path.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return found


def section(folder: Path, cfg: Health) -> list[str]:
    host = (folder / "host.txt").read_text().strip().splitlines()
    repeats = [c for p in sorted(folder.glob("canary-*.json")) if (c := _load(p))]
    loaded = _load(folder / "loaded.json")
    lines = [f"## {host[0].removeprefix('gpu: ')}", "", "```", *host, "```", ""]
    if not repeats:
        return [*lines, "No canary ran.", ""]
    tol = band.Tolerances(cfg.tolerance, cfg.launch_tolerance)
    readings = [band.readings(c["figures"], c.get("clocks", {})) for c in repeats]
    lines += ["| figure | median | min | max | spread | bound at defaults |", "|---|---:|---:|---:|---:|---:|"]
    bounds = band.bands(((f"r{i}", r) for i, r in enumerate(readings)), tol)
    for name in sorted(readings[0]):
        values = [r[name] for r in readings if name in r]
        spread = max(values) / min(values) - 1
        bound = bounds[name].bound
        lines.append(
            f"| {name} | {statistics.median(values):,.4g} | {min(values):,.4g} | {max(values):,.4g} | {spread:.1%} "
            f"| {('>= ' if band.HIGHER_BETTER[name] else '<= ')}{bound:,.4g} |"
        )
    seconds = [float(c["seconds"]) for c in repeats]
    failing = [
        i for i, r in enumerate(readings) if band.judge(r, repeats[i]["clocks"].get("throttle_reasons", []), bounds)
    ]
    reasons = sorted({t for c in repeats for t in c.get("clocks", {}).get("throttle_reasons", [])})
    lines += [
        "",
        f"- cost: {statistics.median(seconds):.1f} s per canary (median of {len(seconds)}; {min(seconds):.1f} to "
        f"{max(seconds):.1f} s) inside the canary's process, CUDA's start included (the `canary i: wall` lines above "
        "add Python's and torch's import)",
        f"- repeats outside the band their own history makes: {len(failing)} of {len(readings)}",
        f"- throttle reasons seen: {', '.join(reasons) or 'none'}",
    ]
    if loaded:
        found = band.readings(loaded["figures"], loaded.get("clocks", {}))
        why = band.judge(found, loaded.get("clocks", {}).get("throttle_reasons", []), bounds)
        lines.append(
            f"- beside a neighbour's 2 GiB copies: {'quarantined' if why else 'passed'}"
            + (": " + "; ".join(w.split(": outside")[0] for w in why) if why else "")
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cfg = Health()
    body = [
        "# The host canary on our GPUs",
        "",
        "Measured with `bash bench/canary_gpu.sh` on each GPU, then",
        "",
        f"    python -m bench.canary_report {' '.join(str(f) for f in args.folders)} --out {args.out}",
        "",
    ]
    for folder in args.folders:
        body += section(folder, cfg)
    args.out.write_text("\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()
