"""How long ``dkpca --help`` and ``dkpca fit --help`` take, and which imports cost most.

    python benchmarks/cli_startup.py [--runs 10] [--top 8]

Each run is a fresh interpreter (``python -m dkpca ...``), as a user's shell
starts it; prints the median and best wall time per command, with a bare
``python -c pass`` as the floor, then the slowest imports of one run by
``python -X importtime``.  The aim is well under a second on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {"python -c pass": ["-c", "pass"], "dkpca --help": ["-m", "dkpca", "--help"],
            "dkpca fit --help": ["-m", "dkpca", "fit", "--help"]}


def wall_times(args: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return times


def slowest_imports(args: list[str], top: int) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the ``top`` slowest top-level imports."""
    err = subprocess.run([sys.executable, "-X", "importtime", *args], check=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if not name[1:].startswith(" "):  # indentation is the nesting depth: keep the top level only
            rows.append((int(cumulative) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    for label, args in COMMANDS.items():
        t = wall_times(args, a.runs)
        print(f"{label:18s} median {statistics.median(t):.3f} s, best {min(t):.3f} s ({a.runs} runs)")
    print("slowest top-level imports of 'dkpca --help' (cumulative):")
    for seconds, name in slowest_imports(COMMANDS["dkpca --help"], a.top):
        print(f"  {seconds:7.3f} s  {name}")


if __name__ == "__main__":
    main()
