#!/usr/bin/env python3
"""Medians of the A/B rounds that scripts/ab.sh wrote into OUT.

Usage (Python 3.8+, standard library only):

    scripts/ab_summary.py OUT

ab.sh leaves one `osprey bench` output folder per binary, round and
workload: OUT/<binary>-r<round>-init and OUT/<binary>-r<round>-many, each
with one JSON file per run. Prints one line per binary: the median over
every round of each figure (milliseconds, except req/s), and how many warm
initial loads that is. The "cold" runs are the first after ab.sh restarted
Osprey on that binary.
"""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def collect(out_dir):
    """{binary: {figure: [values]}} from every run file under out_dir."""
    figures = defaultdict(lambda: defaultdict(list))
    for path in sorted(Path(out_dir).glob("*/*.json")):
        run = json.loads(path.read_text())
        binary = path.parent.name.rsplit("-r", 1)[0]
        workload = run["workload"]
        wall_ms = run["wall_seconds"] * 1000
        if run["run"] == "cold":
            figures[binary][workload + " cold"].append(wall_ms)
            continue
        figures[binary][workload + " wall"].append(wall_ms)
        if workload == "many-wallets":
            figures[binary]["many p99"].append(run["latency"]["p99_ms"])
            figures[binary]["many req/s"].append(run["requests_per_second"])
        else:
            figures[binary]["init batch p50"].append(run["latency"]["p50_ms"])
    return figures


def medians(figures):
    """{binary: ({figure: median, rounded to 0.01}, warm initial loads)}."""
    return {
        binary: (
            {name: round(statistics.median(values), 2) for name, values in sorted(by_name.items())},
            len(by_name.get("initial-load wall", [])),
        )
        for binary, by_name in figures.items()
    }


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: ab_summary.py OUT")
    for binary, (median, warm_loads) in medians(collect(argv[1])).items():
        print(binary, median, warm_loads)


if __name__ == "__main__":
    main(sys.argv)
