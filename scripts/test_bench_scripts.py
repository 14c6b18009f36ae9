"""Unit tests of the figures ab_summary.py and tip_latency.py compute.

    cd scripts && python3 -m unittest test_bench_scripts

crates/bench/tests/scripts.rs runs them under `cargo test`.
"""
import json
import tempfile
import unittest
from pathlib import Path

import ab_summary
import tip_latency


def bench_run(workload, run, wall_seconds, p50_ms, p99_ms, requests_per_second):
    """The fields of an `osprey bench` run file that ab_summary reads."""
    return {
        "workload": workload,
        "run": run,
        "wall_seconds": wall_seconds,
        "requests_per_second": requests_per_second,
        "latency": {"p50_ms": p50_ms, "p99_ms": p99_ms},
    }


class AbSummary(unittest.TestCase):
    def write_round(self, out, folder, runs):
        (out / folder).mkdir()
        for i, run in enumerate(runs):
            (out / folder / f"127.0.0.1-29540.{run['workload']}.{i}.json").write_text(json.dumps(run))
        # The report beside the run files is not a run.
        (out / folder / "report.md").write_text("# report\n")

    def test_medians_per_binary_over_every_round_cold_runs_apart(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            for round_, walls in ((1, (0.020, 0.010)), (2, (0.030, 0.040))):
                self.write_round(
                    out,
                    f"osprey-rc-r{round_}-init",
                    [bench_run("initial-load", "cold", 0.100 * round_, 1.0, 2.0, 0.0)]
                    + [bench_run("initial-load", f"run{i + 1}", w, 0.2 * round_, 1.0, 0.0) for i, w in enumerate(walls)],
                )
                self.write_round(
                    out,
                    f"osprey-rc-r{round_}-many",
                    [bench_run("many-wallets", "run1", 0.250, 1.0, 50.0 + round_, 80000.0 * round_)],
                )
            self.write_round(out, "base-r1-init", [bench_run("initial-load", "run1", 0.016, 0.17, 1.0, 0.0)])

            summary = ab_summary.medians(ab_summary.collect(out))

            self.assertEqual(sorted(summary), ["base", "osprey-rc"], "the binary is the name before the last -r")
            median, warm_loads = summary["osprey-rc"]
            self.assertEqual(warm_loads, 4)
            self.assertEqual(median["initial-load wall"], 25.0)
            self.assertEqual(median["initial-load cold"], 150.0)
            self.assertEqual(median["init batch p50"], 0.3)
            self.assertEqual(median["many-wallets wall"], 250.0)
            self.assertEqual(median["many p99"], 51.5)
            self.assertEqual(median["many req/s"], 120000.0)
            self.assertNotIn("many-wallets cold", median)
            self.assertEqual(summary["base"], ({"init batch p50": 0.17, "initial-load wall": 16.0}, 1))


class TipLatency(unittest.TestCase):
    def test_summary_gives_medians_and_maxima_of_both_delays(self):
        line = tip_latency.summary("osprey", [(2.0, 60.0), (9.5, 75.0), (3.0, 61.0)])
        self.assertEqual(
            line,
            "osprey: after generatetodescriptor returned: median 3.0 ms (max 9.5); "
            "since it was called (includes mining and the CLI): median 61.0 ms (max 75.0); 3 blocks",
        )


if __name__ == "__main__":
    unittest.main()
