#!/usr/bin/env python3
"""Hostile-client load tool: what an Electrum server's memory and a
well-behaved wallet's latency do while hostile clients attack it (issue 8).

Usage (Python 3.8+, standard library only):

    scripts/hostile.py --start-demo target/release/osprey [--phase-secs 20] [--json out.json]
    scripts/hostile.py --server 127.0.0.1:50001 --pid 12345 [--manifest DIR/manifest.json]

With --start-demo the tool runs `osprey demo --preset tiny` on a free
loopback port in a temporary directory (raising the open-files limit it
inherits first), reads the demo's manifest for real script hashes, and stops
the demo at the end. Otherwise it attacks the server at --server and samples
the memory of --pid (the server's process).

LOOPBACK ONLY: any host other than 127.0.0.1 or localhost is refused. Every
phase is bounded in connections and in time (--phase-secs, plus at most
--drain-secs to read what hostile sessions were sent, and for idle-flood
the newcomer's --newcomer-cap-secs); hostile sockets are closed when their
phase ends, and the tool always exits.

Throughout the run:
  * the server's VmRSS (/proc/PID/status) is sampled every 100 ms; each phase
    reports its peak (over the phase and its rest) and its resting RSS,
    --rest-secs (10) after the phase's hostile sockets were closed;
  * a well-behaved wallet (its own process, so the attack's load on this
    tool does not count as server latency) negotiates server.version 1.4,
    subscribes a few script hashes, and every 100 ms sends
    blockchain.scripthash.get_history and blockchain.headers.subscribe;
    each phase reports p50/p99/max latency and errors (a -102 "server busy"
    answer is counted apart as "busy").

Phases (--phases picks a subset, in this order):
  baseline       the wallet alone (--baseline-secs).
  big-replies    --big-sessions (40) sessions each send one batch of
                 --big-batch (200) blockchain.block.headers [0, 2016] with a
                 tiny receive buffer and never read.
  partial-lines  --partial-sessions (300) sessions each send --partial-bytes
                 (999,000, just under the default 1,000,000-byte line cap)
                 of a request line without its newline, and hold it.
  subscriptions  --sub-sessions (8) sessions each subscribe up to
                 --sub-per-session (50,000) distinct script hashes in
                 batches of --sub-batch (200), reading the replies; reports
                 how many were refused, and holds them to the phase's end.
  idle-flood     --idle-conns (1,000) connections that send nothing; then a
                 newcomer wallet retries once a second until it is served
                 (the server sheds connections silent for 5 s) or
                 --newcomer-cap-secs (90) pass; reports how long it waited.
  amplification  --amp-sessions (50) sessions re-ask one large history as
                 fast as they can, reading the replies; reports bytes in/out.
                 The script hash is --big-scripthash, else the longest
                 history found (manifest wallet plus outputs sampled from the
                 chain through the server itself).
  after          a fresh wallet must be served once every phase is over.

Output: a Markdown table on stdout; --json OUT writes every raw figure (RSS
samples, every wallet request, per-phase hostile counters). Exit status 0
unless the tool itself failed (1), or bad arguments (2).
"""

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PHASES = ["big-replies", "partial-lines", "subscriptions", "idle-flood", "amplification"]
# Replies we parse can be large (a 200-request batch of headers is ~15 MB).
READ_LIMIT = 64 << 20
# How long a single connect + server.version may take before it counts as failed.
CONNECT_TIMEOUT = 5.0
ERROR_CODE = re.compile(rb'"code"\s*:\s*(-?\d+)')
SERVER_BUSY = -102
DRAIN_SILENCE_SECS = 2.0
# Upper bounds on every count, so no flag turns this into an unbounded flood.
BOUNDS = {
    "big_sessions": 1000,
    "big_batch": 10_000,
    "partial_sessions": 2000,
    "partial_bytes": 16 << 20,
    "sub_sessions": 100,
    "sub_per_session": 1_000_000,
    "sub_batch": 10_000,
    "idle_conns": 10_000,
    "amp_sessions": 1000,
    "phase_secs": 3600,
    "newcomer_cap_secs": 3600,
}


def now():
    return time.monotonic()


def log(message):
    print(f"[hostile {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def request_line(request_id, method, params):
    return (json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + "\n").encode()


def version_line(client_name):
    return request_line(0, "server.version", [client_name, "1.4"])


def count_codes(counts, data):
    for match in ERROR_CODE.finditer(data):
        code = int(match.group(1))
        counts[code] = counts.get(code, 0) + 1


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class Closed(Exception):
    """The server closed the connection; `code` is the error it sent first, if any."""

    def __init__(self, code=None):
        super().__init__(f"connection closed (error {code})" if code is not None else "connection closed")
        self.code = code


def error_kind(exc):
    """A short label for a failed request, "busy" for the server's -102."""
    code = getattr(exc, "code", None)
    if code == SERVER_BUSY:
        return "busy"
    if isinstance(exc, RpcError):
        return f"rpc {exc.code}"
    if isinstance(exc, Closed):
        return "closed"
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    return type(exc).__name__


class Client:
    """A JSON-RPC client over one TCP connection: requests matched to replies
    by id, notifications ignored, byte counts kept."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.pending = {}
        self.next_id = 1
        self.bytes_in = 0
        self.bytes_out = 0
        self.closed = False
        self.error_code = None
        self.task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(cls, addr, client_name="hostile"):
        """Connects and negotiates server.version 1.4."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(addr[0], addr[1], limit=READ_LIMIT), CONNECT_TIMEOUT
        )
        client = cls(reader, writer)
        try:
            await client.call("server.version", [client_name, "1.4"], CONNECT_TIMEOUT)
        except BaseException:
            client.close()
            raise
        return client

    async def _read_loop(self):
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                self.bytes_in += len(line)
                message = json.loads(line)
                for reply in message if isinstance(message, list) else [message]:
                    if not isinstance(reply, dict):
                        continue
                    request_id = reply.get("id")
                    future = self.pending.pop(request_id, None) if request_id is not None else None
                    if future is not None:
                        if not future.done():
                            future.set_result(reply)
                    elif request_id is None and isinstance(reply.get("error"), dict):
                        # An error the server could not pin on a request (a
                        # refused connection, an overlong line): it answers
                        # everything outstanding.
                        self.error_code = reply["error"].get("code")
                        self._fail_pending(RpcError(self.error_code, reply["error"].get("message")))
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed = True
            self._fail_pending(Closed(self.error_code))

    def _fail_pending(self, exc):
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)

    def _send(self, payload, ids):
        if self.closed:
            raise Closed(self.error_code)
        loop = asyncio.get_running_loop()
        futures = []
        for request_id in ids:
            future = loop.create_future()
            self.pending[request_id] = future
            futures.append(future)
        line = (json.dumps(payload) + "\n").encode()
        self.writer.write(line)
        self.bytes_out += len(line)
        return futures

    async def call(self, method, params, timeout):
        request_id = self.next_id
        self.next_id += 1
        (future,) = self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, [request_id])
        try:
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(request_id, None)
        if "error" in reply and reply["error"] is not None:
            raise RpcError(reply["error"].get("code"), reply["error"].get("message"))
        return reply.get("result")

    async def batch(self, calls, timeout):
        """Sends `calls` ([(method, params)]) as one batch; returns each reply
        (a dict with "result" or "error")."""
        ids = list(range(self.next_id, self.next_id + len(calls)))
        self.next_id += len(calls)
        payload = [
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            for request_id, (method, params) in zip(ids, calls)
        ]
        futures = self._send(payload, ids)
        try:
            # Every outcome retrieved, so a closed connection does not leave
            # "exception never retrieved" warnings behind.
            replies = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout)
        finally:
            for request_id in ids:
                self.pending.pop(request_id, None)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        return replies

    def close(self):
        self.task.cancel()
        self.writer.close()


# ---------------------------------------------------------------- raw sockets


class RawPool:
    """Non-blocking sockets that hostile sessions write to and never read
    (until the drain at the end of their phase); all closed together."""

    def __init__(self):
        self.sockets = []

    async def connect(self, addr, rcvbuf=None):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sockets.append(sock)
        sock.setblocking(False)
        if rcvbuf:
            # Set before connecting so the TCP window is small from the start:
            # the server, not the kernel, has to hold what we do not read.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, addr), CONNECT_TIMEOUT)
        return sock

    def close(self):
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass
        self.sockets = []


async def drain(sock, deadline, record):
    """Reads what the server sent `sock` until it closes or `deadline`:
    byte count, error codes seen, and whether it was closed."""
    loop = asyncio.get_running_loop()
    record.setdefault("bytes_received", 0)
    record.setdefault("codes", {})
    tail = b""
    try:
        while now() < deadline:
            # Two seconds of silence: the server holds nothing more for us (or is
            # still building it; the report says what arrived in time).
            wait = max(0.01, min(DRAIN_SILENCE_SECS, deadline - now()))
            data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), wait)
            if not data:
                record["closed_by_server"] = True
                return
            if not record["bytes_received"]:
                # What the server said first, for the report (lines can be 15 MB).
                record["first_bytes"] = data[:600].decode("utf-8", "replace")
            record["bytes_received"] += len(data)
            # Keep a short tail so a code split between two reads is still seen.
            window = tail + data
            for match in ERROR_CODE.finditer(window):
                if match.end() > len(tail):
                    code = int(match.group(1))
                    record["codes"][code] = record["codes"].get(code, 0) + 1
            tail = window[-32:]
    except asyncio.TimeoutError:
        pass
    except OSError as exc:
        record["closed_by_server"] = True
        record["reset"] = type(exc).__name__


async def run_until(deadline, coroutines):
    """Runs the coroutines as tasks; cancels those still running at `deadline`."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - now()))
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, asyncio.CancelledError):
            log(f"worker failed: {result!r}")


async def bounded(concurrency, coroutines):
    """Awaits the coroutines with at most `concurrency` running at once."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(coroutine):
        async with semaphore:
            return await coroutine

    return await asyncio.gather(*(one(c) for c in coroutines), return_exceptions=True)


def merge_codes(records):
    codes = {}
    for record in records:
        for code, n in record.get("codes", {}).items():
            codes[code] = codes.get(code, 0) + n
    return codes


def describe_codes(codes):
    return ", ".join(f"{n}x {code}" for code, n in sorted(codes.items())) or "none"


# --------------------------------------------------------------------- phases


async def phase_big_replies(ctx, deadline):
    args = ctx.args
    pool = RawPool()
    records = [{} for _ in range(args.big_sessions)]
    batch = (
        json.dumps(
            [
                {"jsonrpc": "2.0", "id": i + 1, "method": "blockchain.block.headers", "params": [0, args.big_count]}
                for i in range(args.big_batch)
            ]
        )
        + "\n"
    ).encode()

    async def attack(record):
        try:
            sock = await pool.connect(ctx.addr, rcvbuf=args.hostile_rcvbuf)
            record["sock"] = sock
            await asyncio.get_running_loop().sock_sendall(sock, version_line("hostile-big-replies") + batch)
            record["sent"] = True
        except (OSError, asyncio.TimeoutError) as exc:
            record["send_error"] = type(exc).__name__

    try:
        await run_until(deadline, [bounded(50, [attack(r) for r in records])])
        await asyncio.sleep(max(0.0, deadline - now()))
        drain_deadline = now() + args.drain_secs
        for record in records:
            if "sock" in record:
                # The attack is over: read what is waiting at a useful speed.
                record["sock"].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        await asyncio.gather(*(drain(r["sock"], drain_deadline, r) for r in records if "sock" in r))
    finally:
        pool.close()
    for record in records:
        record.pop("sock", None)
    sent = sum(1 for r in records if r.get("sent"))
    closed = sum(1 for r in records if r.get("closed_by_server"))
    received = sorted(r.get("bytes_received", 0) for r in records)
    codes = merge_codes(records)
    notes = (
        f"{sent}/{len(records)} sessions sent a {len(batch) / 1024:.1f} KiB batch; afterwards "
        f"{closed} found closed by server; median {received[len(received) // 2] / 1e6:.1f} MB "
        f"read per session in the {args.drain_secs:.0f} s drain; error codes {describe_codes(codes)}"
    )
    return notes, {"sessions": records, "batch_bytes": len(batch), "sent": sent, "closed_by_server": closed, "codes": codes}


async def phase_partial_lines(ctx, deadline):
    args = ctx.args
    pool = RawPool()
    records = [{} for _ in range(args.partial_sessions)]
    head = b'{"jsonrpc":"2.0","id":1,"method":"server.ping","params":["'
    unfinished = head + b"a" * max(0, args.partial_bytes - len(head))

    async def attack(record):
        try:
            sock = await pool.connect(ctx.addr)
            record["sock"] = sock
            await asyncio.get_running_loop().sock_sendall(sock, version_line("hostile-partial-lines") + unfinished)
            record["sent"] = True
        except (OSError, asyncio.TimeoutError) as exc:
            record["send_error"] = type(exc).__name__

    try:
        await run_until(deadline, [bounded(50, [attack(r) for r in records])])
        await asyncio.sleep(max(0.0, deadline - now()))
        drain_deadline = now() + args.drain_secs
        await asyncio.gather(*(drain(r["sock"], drain_deadline, r) for r in records if "sock" in r))
    finally:
        pool.close()
    for record in records:
        record.pop("sock", None)
    sent = sum(1 for r in records if r.get("sent"))
    failed = sum(1 for r in records if "send_error" in r)
    closed = sum(1 for r in records if r.get("closed_by_server"))
    codes = merge_codes(records)
    notes = (
        f"{sent}/{len(records)} sessions sent {len(unfinished):,} B unfinished ({failed} send failed); "
        f"afterwards {closed} found closed by server; error codes {describe_codes(codes)}"
    )
    return notes, {
        "sessions": records,
        "line_bytes": len(unfinished),
        "sent": sent,
        "send_failed": failed,
        "closed_by_server": closed,
        "codes": codes,
    }


async def phase_subscriptions(ctx, deadline):
    args = ctx.args
    records = [{"subscribed": 0, "codes": {}} for _ in range(args.sub_sessions)]
    clients = []
    started = now()

    async def attack(index, record):
        try:
            client = await Client.open(ctx.addr, "hostile-subscriptions")
        except (OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
            record["connect_error"] = error_kind(exc)
            return
        clients.append(client)
        done = 0
        while done < args.sub_per_session and now() < deadline:
            count = min(args.sub_batch, args.sub_per_session - done)
            calls = [
                (
                    "blockchain.scripthash.subscribe",
                    [hashlib.sha256(f"hostile-{index}-{done + i}".encode()).hexdigest()],
                )
                for i in range(count)
            ]
            try:
                replies = await client.batch(calls, max(0.1, deadline - now()))
            except (asyncio.TimeoutError, Closed, RpcError, OSError) as exc:
                record["stopped_by"] = error_kind(exc)
                return
            for reply in replies:
                error = reply.get("error")
                if error:
                    code = error.get("code")
                    record["codes"][code] = record["codes"].get(code, 0) + 1
                else:
                    record["subscribed"] += 1
            done += count
        if done == args.sub_per_session:
            record["finished_after_secs"] = round(now() - started, 2)

    try:
        await run_until(deadline, [attack(i, r) for i, r in enumerate(records)])
        # Hold the subscriptions until the phase ends.
        await asyncio.sleep(max(0.0, deadline - now()))
        still_open = sum(1 for c in clients if not c.closed)
    finally:
        for client in clients:
            client.close()
    subscribed = sum(r["subscribed"] for r in records)
    codes = merge_codes(records)
    refused = sum(codes.values())
    attempted = subscribed + refused
    finished = [r["finished_after_secs"] for r in records if "finished_after_secs" in r]
    notes = (
        f"{subscribed:,} subscribed, {refused:,} refused ({describe_codes(codes)}) of "
        f"{attempted:,} sent (target {args.sub_sessions * args.sub_per_session:,}); "
        f"{len(finished)}/{len(records)} sessions finished"
        + (f" (last after {max(finished):.1f} s)" if finished else "")
        + f"; {still_open} still open at the end"
    )
    return notes, {
        "sessions": records,
        "subscribed": subscribed,
        "refused": refused,
        "codes": codes,
        "still_open": still_open,
    }


async def phase_idle_flood(ctx, deadline):
    args = ctx.args
    pool = RawPool()
    records = [{} for _ in range(args.idle_conns)]
    loop = asyncio.get_running_loop()
    watchers = []
    flood_start = now()

    async def watch(sock, record):
        # Idle connections send nothing; reading only learns whether the
        # server refused (a -102 line) or shed them.
        try:
            while True:
                data = await loop.sock_recv(sock, 4096)
                if not data:
                    break
                count_codes(record.setdefault("codes", {}), data)
        except OSError:
            pass
        record["closed_after_secs"] = round(now() - flood_start, 2)

    async def open_idle(record):
        try:
            sock = await pool.connect(ctx.addr)
        except (OSError, asyncio.TimeoutError) as exc:
            record["connect_error"] = type(exc).__name__
            return
        watchers.append(asyncio.ensure_future(watch(sock, record)))

    newcomer = {"attempts": [], "served_after_secs": None}
    try:
        await bounded(100, [open_idle(r) for r in records])
        opened = sum(1 for r in records if "connect_error" not in r)
        log(f"idle-flood: {opened} idle connections open in {now() - flood_start:.1f} s")
        # Give refusals a moment to arrive, so they are not counted as shed.
        await asyncio.sleep(1.0)
        refused_at_connect = sum(1 for r in records if "closed_after_secs" in r)
        newcomer_start = now()
        newcomer_deadline = newcomer_start + args.newcomer_cap_secs
        while now() < newcomer_deadline:
            attempt_start = now()
            try:
                client = await Client.open(ctx.addr, "hostile-newcomer")
                try:
                    await client.call("blockchain.scripthash.get_history", [ctx.wallet_scripthashes[0]], CONNECT_TIMEOUT)
                    await client.call("blockchain.headers.subscribe", [], CONNECT_TIMEOUT)
                finally:
                    client.close()
                newcomer["served_after_secs"] = round(now() - newcomer_start, 2)
                newcomer["attempts"].append({"at": round(attempt_start - newcomer_start, 2), "result": "served"})
                break
            except (OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
                newcomer["attempts"].append({"at": round(attempt_start - newcomer_start, 2), "result": error_kind(exc)})
            await asyncio.sleep(max(0.0, min(1.0 - (now() - attempt_start), newcomer_deadline - now())))
        await asyncio.sleep(max(0.0, deadline - now()))
        shed = sum(
            1 for r in records if "closed_after_secs" in r and r["closed_after_secs"] > newcomer_start - flood_start
        )
    finally:
        for watcher in watchers:
            watcher.cancel()
        pool.close()
    codes = merge_codes(records)
    results = {}
    for attempt in newcomer["attempts"]:
        results[attempt["result"]] = results.get(attempt["result"], 0) + 1
    waited = newcomer["served_after_secs"]
    notes = (
        f"{opened}/{len(records)} idle connections opened, {refused_at_connect} closed at once, "
        f"{shed} shed later; newcomer "
        + (f"served after {waited:.1f} s" if waited is not None else f"NOT served within {args.newcomer_cap_secs} s")
        + f" ({len(newcomer['attempts'])} attempts: "
        + ", ".join(f"{n}x {k}" for k, n in sorted(results.items()))
        + f"); error codes to idle {describe_codes(codes)}"
    )
    return notes, {
        "connections": records,
        "opened": opened,
        "closed_at_once": refused_at_connect,
        "shed_later": shed,
        "codes": codes,
        "newcomer": newcomer,
    }


async def phase_amplification(ctx, deadline):
    args = ctx.args
    records = [{"requests": 0, "replies": 0, "bytes_out": 0, "bytes_in": 0, "codes": {}} for _ in range(args.amp_sessions)]
    writers = []
    request = request_line(1, "blockchain.scripthash.get_history", [ctx.big_scripthash])
    started = now()

    async def attack(record):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(ctx.addr[0], ctx.addr[1], limit=READ_LIMIT), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError) as exc:
            record["connect_error"] = type(exc).__name__
            return
        writers.append(writer)
        try:
            writer.write(version_line("hostile-amplification"))
            await reader.readline()
            # Lines are counted, not parsed: parsing would make this tool, not
            # the server, the bottleneck. A history reply never says "error".
            while True:
                writer.write(request)
                record["requests"] += 1
                record["bytes_out"] += len(request)
                line = await reader.readline()
                if not line:
                    record["closed_by_server"] = True
                    return
                record["replies"] += 1
                record["bytes_in"] += len(line)
                if b'"error"' in line:
                    count_codes(record["codes"], line)
        except (OSError, ValueError) as exc:
            record["closed_by_server"] = True
            record["error"] = type(exc).__name__

    try:
        await run_until(deadline, [attack(r) for r in records])
    finally:
        for writer in writers:
            writer.close()
    elapsed = max(0.001, now() - started)
    bytes_out = sum(r["bytes_out"] for r in records)
    bytes_in = sum(r["bytes_in"] for r in records)
    replies = sum(r["replies"] for r in records)
    closed = sum(1 for r in records if r.get("closed_by_server"))
    codes = merge_codes(records)
    ratio = bytes_in / bytes_out if bytes_out else 0.0
    history_len = ctx.big_history_len
    notes = (
        f"{args.amp_sessions} sessions re-asked a {history_len if history_len is not None else '?'}-tx history: "
        f"{replies:,} replies ({replies / elapsed:,.0f}/s), in/out {ratio:.0f}x, "
        f"{bytes_in / elapsed / 1e6:.1f} MB/s to them; {closed} closed by server; error codes {describe_codes(codes)}"
    )
    return notes, {
        "sessions": records,
        "scripthash": ctx.big_scripthash,
        "history_len": history_len,
        "elapsed_secs": elapsed,
        "replies": replies,
        "bytes_out": bytes_out,
        "bytes_in": bytes_in,
        "ratio_in_out": ratio,
        "mb_per_sec_in": bytes_in / elapsed / 1e6,
        "closed_by_server": closed,
        "codes": codes,
    }


PHASE_FUNCTIONS = {
    "big-replies": phase_big_replies,
    "partial-lines": phase_partial_lines,
    "subscriptions": phase_subscriptions,
    "idle-flood": phase_idle_flood,
    "amplification": phase_amplification,
}


# ---------------------------------------------------------- well-behaved wallet


async def wallet_loop(addr, scripthashes, interval, timeout, stop, ready, samples):
    """Runs until `stop` is set; appends (sent_at, method, latency_ms or
    None, error or None) to `samples`; sets `ready` once first subscribed."""
    client = None
    index = 0
    next_tick = now()
    while not stop.is_set():
        if client is None or client.closed:
            if client is not None:
                client.close()
                samples.append((now(), "session", None, "session lost"))
            sent_at = now()
            try:
                client = await Client.open(addr, "osprey-hostile-wallet")
                for scripthash in scripthashes:
                    await client.call("blockchain.scripthash.subscribe", [scripthash], timeout)
                ready.set()
            except (OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
                samples.append((sent_at, "connect", None, error_kind(exc)))
                if client is not None:
                    client.close()
                client = None
                await asyncio.sleep(1.0)
                continue
        sent_at = now()
        scripthash = scripthashes[index % len(scripthashes)]
        index += 1

        async def timed(method, params):
            start = now()
            try:
                await client.call(method, params, timeout)
                samples.append((start, method, (now() - start) * 1000.0, None))
            except (OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
                samples.append((start, method, None, error_kind(exc)))

        await asyncio.gather(
            timed("blockchain.scripthash.get_history", [scripthash]),
            timed("blockchain.headers.subscribe", []),
        )
        next_tick = max(next_tick + interval, sent_at)
        await asyncio.sleep(max(0.0, next_tick - now()))
    if client is not None:
        client.close()


def wallet_process(addr, scripthashes, interval, timeout, stop, ready, connection):
    """Entry point of the wallet's own process: sends its samples back when stopped."""
    samples = []
    # Ctrl-C is the parent's to handle; it stops this process through `stop`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(wallet_loop(tuple(addr), scripthashes, interval, timeout, stop, ready, samples))
    finally:
        connection.send(samples)
        connection.close()


# ------------------------------------------------------------------- sampling


class RssSampler(threading.Thread):
    """Samples VmRSS of a process every 100 ms, in a thread of its own so a
    busy event loop does not skip samples."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.path = f"/proc/{pid}/status"
        self.samples = []
        self.stopped = threading.Event()
        self.gone_at = None

    def read_kib(self):
        with open(self.path) as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def run(self):
        while not self.stopped.is_set():
            try:
                kib = self.read_kib()
            except OSError:
                self.gone_at = now()
                return
            if kib is not None:
                self.samples.append((now(), kib))
            self.stopped.wait(0.1)

    def peak(self, start, end):
        values = [kib for t, kib in self.samples if start <= t <= end]
        return max(values) if values else None

    def last_before(self, t):
        value = None
        for sample_t, kib in self.samples:
            if sample_t > t:
                break
            value = kib
        return value


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(-(-p * len(ordered) // 100)) - 1))
    return ordered[rank]


def wallet_stats(samples, start, end):
    window = [s for s in samples if start <= s[0] < end]
    latencies = [s[2] for s in window if s[2] is not None]
    errors = {}
    for s in window:
        if s[3] is not None:
            errors[s[3]] = errors.get(s[3], 0) + 1
    return {
        "requests": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies) if latencies else None,
        "errors": errors,
        "busy": errors.get("busy", 0),
    }


# ------------------------------------------------------- targets and discovery


def loopback_addr(text):
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    if host not in ("127.0.0.1", "localhost"):
        raise argparse.ArgumentTypeError(f"{text!r}: this tool only attacks 127.0.0.1 or localhost")
    return ("127.0.0.1", int(port))


def raise_open_files(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = soft if soft >= needed else (needed if hard == resource.RLIM_INFINITY else min(hard, needed))
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def process_open_files(pid):
    try:
        with open(f"/proc/{pid}/limits") as limits:
            for line in limits:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_demo(binary, preset, workdir, start_secs):
    port = free_port()
    log_path = os.path.join(workdir, "demo.log")
    demo_dir = os.path.join(workdir, "demo")
    os.mkdir(demo_dir)
    command = [binary, "demo", "--preset", preset, "--dir", demo_dir, "--electrum-rpc-addr", f"127.0.0.1:{port}"]
    log(f"starting {' '.join(command)} (output in {log_path})")
    with open(log_path, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = now() + start_secs
    while now() < deadline:
        if process.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                log(f"demo serving on 127.0.0.1:{port} (pid {process.pid})")
                return process, ("127.0.0.1", port), os.path.join(demo_dir, "chain", "manifest.json")
        except OSError:
            time.sleep(0.5)
    stop_demo(process)
    with open(log_path, errors="replace") as output:
        tail = output.read()[-3000:]
    raise RuntimeError(f"the demo did not serve on port {port} within {start_secs} s:\n{tail}")


def stop_demo(process):
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def output_scripts(raw):
    """The scriptPubKeys of a serialized transaction (segwit or not)."""

    def varint(i):
        first = raw[i]
        if first < 0xFD:
            return first, i + 1
        size = {0xFD: 2, 0xFE: 4, 0xFF: 8}[first]
        return int.from_bytes(raw[i + 1 : i + 1 + size], "little"), i + 1 + size

    i = 4
    if raw[4] == 0 and raw[5] != 0:
        i += 2
    inputs, i = varint(i)
    for _ in range(inputs):
        i += 36
        length, i = varint(i)
        i += length + 4
    outputs, i = varint(i)
    scripts = []
    for _ in range(outputs):
        i += 8
        length, i = varint(i)
        scripts.append(raw[i : i + length])
        i += length
    return scripts


async def discover(addr, manifest_path, big_scripthash, wallet_count, secs):
    """Script hashes for the wallet (used ones from the manifest) and for
    amplification (the longest history among the manifest's wallet and the
    outputs of blocks sampled through the server)."""
    deadline = now() + secs
    wallet = []
    histories = {}
    if manifest_path and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        for address in manifest.get("wallet", {}).get("addresses", []):
            histories[address["scripthash"]] = len(address.get("history", []))
        used = sorted((h for h in histories.items() if h[1] > 0), key=lambda h: h[0])
        wallet = [sh for sh, _ in used[:wallet_count]]
        log(f"manifest {manifest_path}: {len(histories)} wallet script hashes")
    client = await Client.open(addr, "hostile-discovery")
    try:
        tip = (await client.call("blockchain.headers.subscribe", [], 10))["height"]
        if big_scripthash is None:
            counts = {}
            heights = sorted({1 + (tip - 1) * k // 59 for k in range(60)} if tip > 1 else {tip})
            for height in heights:
                if now() > deadline:
                    break
                replies = await client.batch(
                    [("blockchain.transaction.id_from_pos", [height, pos]) for pos in range(40)], 30
                )
                txids = [r["result"] for r in replies if r.get("result")]
                if not txids:
                    continue
                raws = await client.batch([("blockchain.transaction.get", [txid]) for txid in txids], 30)
                for reply in raws:
                    if not reply.get("result"):
                        continue
                    try:
                        scripts = output_scripts(bytes.fromhex(reply["result"]))
                    except (IndexError, KeyError, ValueError):
                        continue
                    for script in scripts:
                        sh = hashlib.sha256(script).digest()[::-1].hex()
                        counts[sh] = counts.get(sh, 0) + 1
            frequent = sorted(counts, key=counts.get, reverse=True)[:50]
            if frequent and now() < deadline:
                replies = await client.batch([("blockchain.scripthash.get_history", [sh]) for sh in frequent], 60)
                for sh, reply in zip(frequent, replies):
                    if isinstance(reply.get("result"), list):
                        histories[sh] = len(reply["result"])
            if histories:
                big_scripthash = max(histories, key=histories.get)
        if not wallet:
            ordinary = sorted((sh for sh, n in histories.items() if 0 < n < 50))
            wallet = ordinary[:wallet_count]
        if not wallet:
            wallet = [hashlib.sha256(f"wallet-{i}".encode()).hexdigest() for i in range(wallet_count)]
        big_len = histories.get(big_scripthash)
        if big_scripthash is not None and big_len is None:
            result = await client.call("blockchain.scripthash.get_history", [big_scripthash], 60)
            big_len = len(result)
    finally:
        client.close()
    if big_scripthash is None:
        big_scripthash = wallet[0]
    return {"tip": tip, "wallet": wallet, "big_scripthash": big_scripthash, "big_history_len": big_len}


# ------------------------------------------------------------------------ run


class Context:
    def __init__(self, args, addr, found):
        self.args = args
        self.addr = addr
        self.wallet_scripthashes = found["wallet"]
        self.big_scripthash = found["big_scripthash"]
        self.big_history_len = found["big_history_len"]


async def check_fresh_session(addr, scripthash):
    start = now()
    try:
        client = await Client.open(addr, "hostile-after")
        try:
            await client.call("blockchain.scripthash.get_history", [scripthash], 10)
            await client.call("blockchain.headers.subscribe", [], 10)
        finally:
            client.close()
        return f"a fresh session was served in {(now() - start) * 1000:.0f} ms"
    except (OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
        return f"a fresh session FAILED: {error_kind(exc)}"


async def run_phases(ctx, sampler, phases):
    args = ctx.args
    rows = []
    for name in phases:
        start = now()
        log(f"phase {name} starts")
        notes, raw = "", {}
        if name == "baseline":
            await asyncio.sleep(args.baseline_secs)
        elif name == "after":
            notes = await check_fresh_session(ctx.addr, ctx.wallet_scripthashes[0])
        else:
            deadline = start + args.phase_secs
            cap = args.phase_secs + args.drain_secs + 30 + (args.newcomer_cap_secs if name == "idle-flood" else 0)
            try:
                notes, raw = await asyncio.wait_for(PHASE_FUNCTIONS[name](ctx, deadline), cap)
            except asyncio.TimeoutError:
                notes = f"phase cut at its {cap:.0f} s cap"
        end = now()
        rest_end = end
        if name not in ("baseline", "after") and args.rest_secs > 0:
            log(f"phase {name} ended after {end - start:.1f} s; resting {args.rest_secs} s")
            await asyncio.sleep(args.rest_secs)
            rest_end = now()
        rows.append(
            {
                "phase": name,
                "start": start,
                "end": end,
                "rest_end": rest_end,
                "rss_start_kib": sampler.last_before(start),
                "rss_peak_kib": sampler.peak(start, rest_end),
                "rss_rest_kib": sampler.last_before(rest_end),
                "notes": notes,
                "hostile": raw,
            }
        )
        log(f"phase {name}: {notes}")
    return rows


def mib(kib):
    return f"{kib / 1024:.0f}" if kib is not None else "-"


def ms(value):
    return f"{value:.1f}" if value is not None else "-"


def markdown(rows):
    lines = [
        "| phase | peak RSS MiB | resting RSS MiB | wallet p50 ms | wallet p99 ms | wallet max ms "
        "| wallet requests | wallet errors (busy) | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        w = row["wallet"]
        errors = sum(w["errors"].values())
        detail = ", ".join(f"{n}x {k}" for k, n in sorted(w["errors"].items()))
        lines.append(
            f"| {row['phase']} | {mib(row['rss_peak_kib'])} | {mib(row['rss_rest_kib'])} | {ms(w['p50_ms'])} "
            f"| {ms(w['p99_ms'])} | {ms(w['max_ms'])} | {w['requests']} | {errors} ({w['busy']})"
            + (f" [{detail}]" if detail else "")
            + f" | {row['notes']} |"
        )
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog="Loopback only."
    )
    target = parser.add_argument_group("target (either --server and --pid, or --start-demo)")
    target.add_argument("--server", type=loopback_addr, help="127.0.0.1:PORT or localhost:PORT")
    target.add_argument("--pid", type=int, help="the server's process id, for its RSS")
    target.add_argument("--start-demo", metavar="OSPREY", help="run `OSPREY demo` on a free port and stop it at the end")
    target.add_argument("--demo-preset", default="tiny")
    target.add_argument("--demo-start-secs", type=float, default=600)
    target.add_argument("--manifest", help="a chaingen manifest.json for real script hashes")
    target.add_argument("--big-scripthash", help="the history amplification re-asks [default: longest found]")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of: " + ", ".join(PHASES))
    parser.add_argument("--phase-secs", type=float, default=20)
    parser.add_argument("--rest-secs", type=float, default=10, help="wait after each phase before reading resting RSS")
    parser.add_argument("--baseline-secs", type=float, default=5)
    parser.add_argument("--drain-secs", type=float, default=5, help="reading what unread sessions were sent")
    parser.add_argument("--wallet-interval-ms", type=float, default=100)
    parser.add_argument("--wallet-timeout-secs", type=float, default=10)
    parser.add_argument("--wallet-scripthashes", type=int, default=5)
    parser.add_argument("--big-sessions", type=int, default=40)
    parser.add_argument("--big-batch", type=int, default=200)
    parser.add_argument("--big-count", type=int, default=2016)
    parser.add_argument("--hostile-rcvbuf", type=int, default=4096, help="SO_RCVBUF of big-replies sessions")
    parser.add_argument("--partial-sessions", type=int, default=300)
    parser.add_argument("--partial-bytes", type=int, default=999_000)
    parser.add_argument("--sub-sessions", type=int, default=8)
    parser.add_argument("--sub-per-session", type=int, default=50_000)
    parser.add_argument("--sub-batch", type=int, default=200)
    parser.add_argument("--idle-conns", type=int, default=1000)
    parser.add_argument("--newcomer-cap-secs", type=float, default=90)
    parser.add_argument("--amp-sessions", type=int, default=50)
    parser.add_argument("--json", metavar="OUT", help="write every raw figure here")
    args = parser.parse_args(argv)
    if args.start_demo:
        if args.server or args.pid:
            parser.error("--start-demo runs its own server: give neither --server nor --pid")
    elif not (args.server and args.pid):
        parser.error("give --server and --pid, or --start-demo")
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phases {unknown}; known: {PHASES}")
    args.phase_list = [p for p in PHASES if p in phases]
    for name, bound in BOUNDS.items():
        value = getattr(args, name)
        if not 0 < value <= bound:
            parser.error(f"--{name.replace('_', '-')} must be in 1..{bound}, got {value}")
    if args.big_scripthash and not re.fullmatch(r"[0-9a-fA-F]{64}", args.big_scripthash):
        parser.error("--big-scripthash must be 64 hex digits")
    return args


def main(argv):
    args = parse_args(argv)
    # Our own sockets, plus the demo's (it inherits the limit): 2,500 at
    # least, as for a server that is to hold 1,000 sessions.
    open_files = raise_open_files(max(2500, args.idle_conns + args.partial_sessions + 1000))
    if open_files < args.idle_conns + 100:
        log(f"warning: open-files limit {open_files} is below what --idle-conns {args.idle_conns} needs")
    workdir = tempfile.mkdtemp(prefix="osprey-hostile-") if args.start_demo else None
    demo = None
    wallet = None
    sampler = None
    warnings = []
    try:
        if args.start_demo:
            demo, addr, manifest = start_demo(os.path.abspath(args.start_demo), args.demo_preset, workdir, args.demo_start_secs)
            pid = demo.pid
            manifest = args.manifest or manifest
        else:
            addr, pid, manifest = args.server, args.pid, args.manifest
            if not os.path.exists(f"/proc/{pid}/status"):
                raise RuntimeError(f"no process {pid}")
        server_files = process_open_files(pid)
        if server_files is not None and server_files < args.idle_conns + 100:
            warnings.append(f"the server's open-files limit is {server_files}, below --idle-conns {args.idle_conns}")
        found = asyncio.run(discover(addr, manifest, args.big_scripthash, args.wallet_scripthashes, 120))
        log(
            f"tip {found['tip']}; wallet script hashes {len(found['wallet'])}; amplification target "
            f"{found['big_scripthash']} ({found['big_history_len']} txs)"
        )
        sampler = RssSampler(pid)
        sampler.start()
        spawn = multiprocessing.get_context("spawn")
        stop = spawn.Event()
        ready = spawn.Event()
        receive, send = spawn.Pipe(duplex=False)
        wallet = spawn.Process(
            target=wallet_process,
            args=(addr, found["wallet"], args.wallet_interval_ms / 1000.0, args.wallet_timeout_secs, stop, ready, send),
            daemon=True,
        )
        wallet.start()
        send.close()
        if not ready.wait(30):
            raise RuntimeError("the well-behaved wallet could not connect and subscribe within 30 s")
        ctx = Context(args, addr, found)
        try:
            rows = asyncio.run(run_phases(ctx, sampler, ["baseline"] + args.phase_list + ["after"]))
        finally:
            stop.set()
            samples = receive.recv() if receive.poll(args.wallet_timeout_secs + 10) else []
            wallet.join(10)
        sampler.stopped.set()
        if sampler.gone_at is not None:
            warnings.append("the server's process ended during the run")
        for row in rows:
            row["wallet"] = wallet_stats(samples, row["start"], row["end"])
            row["wallet_rest"] = wallet_stats(samples, row["end"], row["rest_end"])
        table = markdown(rows)
        print(table)
        for warning in warnings:
            print(f"\nwarning: {warning}")
        if args.json:
            t0 = rows[0]["start"] if rows else 0
            report = {
                "args": {k: v for k, v in vars(args).items()},
                "server": {"addr": f"{addr[0]}:{addr[1]}", "pid": pid, "open_files": server_files},
                "demo_binary": os.path.abspath(args.start_demo) if args.start_demo else None,
                "discovery": found,
                "phases": [
                    {**row, "start": row["start"] - t0, "end": row["end"] - t0, "rest_end": row["rest_end"] - t0}
                    for row in rows
                ],
                "rss_samples_kib": [(round(t - t0, 3), kib) for t, kib in sampler.samples],
                "wallet_samples": [(round(s[0] - t0, 3), s[1], s[2], s[3]) for s in samples],
                "warnings": warnings,
                "table": table,
            }
            with open(args.json, "w") as out:
                json.dump(report, out, indent=1, default=str)
        return 0
    except (RuntimeError, OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
        log(f"failed: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted: sockets closed, stopping")
        return 130
    finally:
        if sampler is not None:
            sampler.stopped.set()
        if wallet is not None and wallet.is_alive():
            wallet.terminate()
        if demo is not None:
            stop_demo(demo)
            log(f"demo stopped (exit {demo.returncode})")
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
