"""Unit tests of the figures ab_summary.py, tip_latency.py and hostile.py
compute, and of what hostile.py sends.

    cd scripts && python3 -m unittest test_bench_scripts

crates/bench/tests/scripts.rs runs them under `cargo test`.
"""
import json
import tempfile
import unittest
from pathlib import Path

import ab_summary
import hostile
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


def sample(t, rss_kib=100, threads=10, fds=40, ticks=0):
    return hostile.Sample(t, rss_kib, threads, fds, ticks)


class HostileProcessFigures(unittest.TestCase):
    def test_status_gives_rss_and_threads(self):
        text = "Name:\tosprey\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nThreads:\t17\nVmSwap:\t0 kB\n"
        self.assertEqual(hostile.parse_status(text), (123456, 17))

    def test_cpu_ticks_count_fields_after_a_command_name_with_spaces(self):
        # Fields 3.. of stat(5): state, ppid, ..., utime (14) = 250, stime (15) = 40.
        after_name = "S 1 2 3 4 5 6 7 8 9 10 250 40 1 1 20 0 17"
        self.assertEqual(hostile.cpu_ticks(f"4242 (tokio rt) worker) {after_name}"), 290)

    def test_cpu_percent_is_of_one_core_over_the_samples_inside_the_window(self):
        samples = [sample(0.0, ticks=0), sample(1.0, ticks=100), sample(3.0, ticks=400), sample(9.0, ticks=9999)]
        # 300 ticks of 100 Hz over the 2 s between the first and last samples in [0.5, 5].
        self.assertAlmostEqual(hostile.cpu_percent(samples, 0.5, 5.0, 100), 150.0)
        self.assertIsNone(hostile.cpu_percent(samples, 4.0, 5.0, 100), "no sample in the window")

    def test_fds_settle_when_back_within_the_tolerance(self):
        samples = [sample(0.0, fds=40), sample(10.0, fds=300), sample(10.5, fds=45), sample(11.5, fds=42)]
        self.assertAlmostEqual(hostile.settle_secs(samples, "fds", 10.0, 20.0, 40), 1.5)
        self.assertIsNone(hostile.settle_secs(samples, "fds", 10.0, 11.0, 40), "not back by the limit")

    def test_process_stats_of_a_phase(self):
        samples = [
            sample(0.0, rss_kib=1000, fds=40, threads=16, ticks=0),
            sample(1.0, rss_kib=5000, fds=300, threads=30, ticks=100),
            sample(2.0, rss_kib=3000, fds=41, threads=20, ticks=150),
            sample(12.0, rss_kib=2000, fds=40, threads=16, ticks=150),
        ]
        stats = hostile.process_stats(samples, 0.5, 2.0, 12.0, 100)
        self.assertEqual(
            (stats["rss_peak_kib"], stats["rss_rest_kib"], stats["fds_before"], stats["fds_peak"]),
            (5000, 2000, 40, 300),
        )
        self.assertEqual((stats["threads_before"], stats["threads_after"]), (16, 16))
        self.assertEqual(stats["fds_settle_secs"], 0.0)
        self.assertAlmostEqual(stats["cpu_percent"], 50.0)

    def test_thread_cpu_by_name_counts_new_threads_from_zero(self):
        before = {"10": ("tokio-rt-worker", 100), "11": ("batch-0", 50), "12": ("gone", 70)}
        after = {"10": ("tokio-rt-worker", 160), "11": ("batch-0", 50), "13": ("tokio-rt-worker", 25)}
        self.assertEqual(hostile.thread_cpu_ticks(before, after), {"tokio-rt-worker": 85, "batch-0": 0})
        self.assertEqual(hostile.threads_by_name(after), {"tokio-rt-worker": 2, "batch-0": 1})

    def test_probe_stats_hold_new_connections_to_one_second(self):
        probes = [(0.5, 20.0, None), (1.5, 1500.0, None), (2.5, None, "timeout"), (3.5, 1000.0, None), (9.0, 1.0, None)]
        self.assertEqual(
            hostile.probe_stats(probes, 0.0, 5.0),
            {"sent": 4, "served": 3, "within_bar": 2, "max_ms": 1500.0, "errors": {"timeout": 1}},
        )

    def test_markdown_row(self):
        row = {
            "phase": "half-close",
            "notes": "300 closed",
            "rested": True,
            "load_1m": 2.5,
            "server": {
                "rss_peak_kib": 2048,
                "rss_rest_kib": 1024,
                "fds_before": 45,
                "fds_peak": 185,
                "fds_after": 50,
                "fds_settle_secs": None,
                "threads_before": 16,
                "threads_after": 18,
                "cpu_percent": 188.4,
            },
            "wallet": {"p50_ms": 1.25, "p99_ms": 250.0, "max_ms": 300.0, "requests": 90, "errors": {"timeout": 1}, "busy": 0},
            "probes": {"sent": 8, "served": 7, "within_bar": 6, "max_ms": 1200.0, "errors": {"timeout": 1}},
        }
        table = hostile.markdown([row]).splitlines()
        self.assertEqual(len(table), 3)
        self.assertEqual(table[0].count("|"), table[2].count("|"), "one cell per column")
        self.assertEqual(
            table[2],
            "| half-close | 2 | 1 | 1.2 | 250.0 | 300.0 | 1/90 (0) [1x timeout] "
            "| 7/8 (6 ≤1 s, max 1200.0) [1x timeout] | 45/185/50 (not back) | 16/18 | 188 | 2.50 | 300 closed |",
        )


class HostileRequests(unittest.TestCase):
    def test_half_close_kinds_take_turns_with_tls_and_ws_only_when_listening(self):
        plain = hostile.half_close_plan(6, tls=False, ws=False)
        self.assertEqual(plain, hostile.HALF_CLOSE_KINDS + hostile.HALF_CLOSE_KINDS[:2])
        every = hostile.half_close_plan(300, tls=True, ws=True)
        self.assertEqual({kind: every.count(kind) for kind in set(every)}["ws-rst"], 37)
        self.assertEqual(len(set(every)), 8)
        self.assertEqual([k for k in every if hostile.closes_with_rst(k)][:4], ["rst-mid-line", "rst-pending", "tls-rst", "ws-rst"])

    def test_vanish_sessions_share_no_script_while_the_pool_lasts(self):
        pool = [f"{i:064x}" for i in range(10)] + [f"{0:064x}"]
        assignment, made_up = hostile.vanish_assignment(pool, sessions=2, per_session=4)
        self.assertEqual(made_up, 0)
        self.assertEqual(len({sh for session in assignment for sh in session}), 8)
        wrapped, _ = hostile.vanish_assignment(pool, sessions=4, per_session=4)
        self.assertTrue(all(len(set(session)) == 4 for session in wrapped), "distinct within a session")

    def test_a_small_pool_is_padded_with_made_up_script_hashes(self):
        assignment, made_up = hostile.vanish_assignment(["aa" * 32], sessions=1, per_session=3)
        self.assertEqual(made_up, 2)
        self.assertEqual(len(set(assignment[0])), 3)
        self.assertEqual(assignment[0][0], "aa" * 32)

    def test_pipeline_subscribes_first_then_mixes_histories_into_headers(self):
        def call(i):
            return json.loads(hostile.pipeline_request(i, ["h1", "h2"], tip=100, heavy_every=20))

        self.assertEqual(call(1)["method"], "blockchain.headers.subscribe")
        self.assertEqual((call(20)["method"], call(20)["params"]), ("blockchain.scripthash.get_history", ["h2"]))
        self.assertEqual(call(40)["params"], ["h1"])
        self.assertEqual((call(150)["method"], call(150)["params"], call(150)["id"]), ("blockchain.block.header", [49], 150))

    def test_the_issue_36_batch_is_581_kib_compact(self):
        calls = [{"jsonrpc": "2.0", "id": i + 1, "method": "blockchain.scripthash.get_history", "params": ["ab" * 32]}
                 for i in range(3949)]
        line = hostile.compact_json(calls)
        self.assertEqual(round(len(line) / 1024, 1), 581.2)
        self.assertNotIn(" ", line)

    def test_reply_id_from_either_end_and_none_for_notifications(self):
        history = b'{"jsonrpc":"2.0","result":[' + b'{"tx_hash":"' + b"ab" * 32 + b'","height":7},' * 50 + b'{}],"id":4321}\n'
        self.assertEqual(hostile.reply_id(history), 4321)
        self.assertEqual(hostile.reply_id(b'{"id":17,"jsonrpc":"2.0","result":"' + b"00" * 100 + b'"}\n'), 17)
        notification = b'{"jsonrpc":"2.0","method":"blockchain.headers.subscribe","params":[{"height":5}]}\n'
        self.assertIsNone(hostile.reply_id(notification))
        self.assertIsNone(hostile.reply_id(b"not json\n"))

    def test_ws_partial_frame_announces_more_than_it_carries(self):
        payload = b'{"id":0}'
        frame = hostile.ws_partial_frame(payload, 1000)
        self.assertEqual(frame[0], 0x81, "final text frame")
        self.assertEqual(frame[1], 0x80 | 126, "masked, 16-bit length")
        self.assertEqual(int.from_bytes(frame[2:4], "big"), 1000)
        mask = frame[4:8]
        self.assertEqual(bytes(b ^ mask[i % 4] for i, b in enumerate(frame[8:])), payload)
        with self.assertRaises(ValueError):
            hostile.ws_partial_frame(payload, 8)

    def test_tls_partial_client_hello_is_shorter_than_its_record(self):
        hello = hostile.tls_partial_client_hello()
        self.assertEqual(hello[:3], b"\x16\x03\x01", "handshake record")
        self.assertEqual(hello[5], 1, "ClientHello")
        self.assertLess(len(hello) - 5, int.from_bytes(hello[3:5], "big"))

    def test_sampled_heights_spread_over_the_chain(self):
        heights = hostile.sample_heights(2500, 10_000)
        self.assertEqual((len(heights), heights[0], heights[-1]), (200, 1, 2500))
        self.assertEqual(hostile.sample_heights(0, 100), [0])


if __name__ == "__main__":
    unittest.main()
