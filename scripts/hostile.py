#!/usr/bin/env python3
"""Hostile-client load tool: what an Electrum server's memory, file
descriptors and CPU, and a well-behaved wallet's latency, do while hostile
clients attack it (issues 8 and 25).

Usage (Python 3.8+, standard library only):

    scripts/hostile.py --start-demo target/release/osprey [--phase-secs 20] [--json out.json]
    scripts/hostile.py --server 127.0.0.1:50001 --pid 12345 [--manifest DIR/manifest.json]
        [--tls-server 127.0.0.1:50002] [--ws-server 127.0.0.1:50003] [--mine-cmd 'bitcoin-cli ...']

With --start-demo the tool runs `osprey demo --preset tiny` on a free
loopback port in a temporary directory (raising the open-files limit it
inherits first), reads the demo's manifest for real script hashes, and stops
the demo at the end. Otherwise it attacks the server at --server and samples
--pid (the server's process). scripts/hostile-core.sh runs it against
`osprey serve` on Bitcoin Core with a chain that has heavy scripts.

LOOPBACK ONLY: any host other than 127.0.0.1 or localhost is refused. Every
phase is bounded in connections and in time (--phase-secs, --amp-secs,
--pipeline-secs, plus at most --drain-secs to read what hostile sessions
were sent, and for idle-flood the newcomer's --newcomer-cap-secs); hostile
sockets are closed when their phase ends, and the tool always exits.

Throughout the run:
  * the server's VmRSS and thread count (/proc/PID/status), open file
    descriptors (/proc/PID/fd entries) and CPU time (/proc/PID/stat) are
    sampled every 100 ms; each phase reports its peak RSS (over the phase and
    its rest) and its resting RSS, --rest-secs (10) after the phase's hostile
    sockets were closed; fds before the phase, at their peak and after the
    rest (and how long they took to come back within 2 of where they were);
    threads before and after (the JSON has, per phase, the threads by name
    after the rest and the CPU ticks each name used during the phase);
    the server's CPU% over the phase (200% is two cores); the machine's
    1-minute load average at the phase's end;
  * a well-behaved wallet (its own process, so the attack's load on this
    tool does not count as server latency) negotiates server.version 1.4,
    subscribes a few script hashes, and every 100 ms sends
    blockchain.scripthash.get_history and blockchain.headers.subscribe;
    each phase reports p50/p99/max latency and errors (a -102 "server busy"
    answer is counted apart as "busy");
  * in the same process, a probe opens a fresh connection every second and
    negotiates server.version (timeout 5 s): each phase reports how many
    were served within 1 s of how many were sent, and the slowest.
  * with --mine-cmd (a shell command that mines a block on the server's
    node), a block is mined --mine-after-secs (5) into each phase whose
    sessions hold subscriptions or unread replies (MINING_PHASES), so its
    notifications reach sessions that do not read.

Phases (--phases picks a subset, run in this order; the first five are
issue 25's, in its order):
  baseline       the wallet alone (--baseline-secs).
  amplification  --amp-sessions (50) sessions re-ask one large history for
                 --amp-secs (10) as fast as they can, reading the replies;
                 reports bytes in/out. The script hash is --big-scripthash,
                 else the longest history found (manifest wallet plus outputs
                 sampled from the chain through the server itself).
  vanish         --vanish-sessions (100) sessions each send
                 blockchain.scripthash.subscribe for --vanish-scripts (200)
                 distinct real script hashes (from the manifest and the
                 sampled outputs, distinct across sessions when enough were
                 found), read the first reply, hold the rest unread until the
                 block is mined (or 2 s), then reset the connection (RST).
  half-close     --half-close-conns (300) connections, in turn: FIN
                 (shutdown SHUT_WR) or RST (SO_LINGER 0) in the middle of a
                 request line; FIN or RST right after a full request for the
                 longest history, while its reply is pending; with
                 --tls-server, FIN or RST after a partial TLS ClientHello;
                 with --ws-server, FIN or RST after the WebSocket upgrade and
                 a partial frame. Half-closed sockets are read until the
                 server closes them (or the phase ends).
  pipeline       one connection writes --pipeline-requests (10,000) requests
                 without waiting (blockchain.headers.subscribe first, then
                 every --pipeline-heavy-every (20)th a get_history of one of
                 the two longest histories, the others blockchain.block.header),
                 then reads every reply (up to --pipeline-secs, 120): checks
                 they come in order and counts bytes.
  big-replies    --big-sessions (600) sessions each subscribe to headers and
                 send one batch of --big-batch (200) blockchain.block.headers
                 [0, 2016] with a tiny receive buffer and never read.
  big-histories  --history-sessions (600) sessions do the same with one batch
                 of --history-batch (3,949: a 581 KiB line, issue 36) compact
                 blockchain.scripthash.get_history of the amplification
                 script hash (the longest history found).
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
  after          a fresh wallet must be served once every phase is over.

Output: a Markdown table on stdout; --json OUT writes every raw figure
(process samples, every wallet request and probe, per-phase hostile
counters). Exit status 0 unless the tool itself failed (1), or bad arguments
(2).
"""

import argparse
import asyncio
import base64
import hashlib
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

PHASES = [
    "amplification",
    "vanish",
    "half-close",
    "pipeline",
    "big-replies",
    "big-histories",
    "partial-lines",
    "subscriptions",
    "idle-flood",
]
# Phases whose hostile sessions hold subscriptions or unread replies: a block
# mined during them (--mine-cmd) sends notifications that nobody reads.
MINING_PHASES = {"amplification", "vanish", "pipeline", "big-replies", "big-histories", "subscriptions"}
# Replies we parse can be large (a 200-request batch of headers is ~15 MB).
READ_LIMIT = 64 << 20
# How long a single connect + server.version may take before it counts as failed.
CONNECT_TIMEOUT = 5.0
# The bar a new connection is held to (issue 25: served within 1 s).
PROBE_BAR_MS = 1000.0
PROBE_INTERVAL_SECS = 1.0
# Open fds within this many of their level before a phase count as back:
# the wallet's session and a probe's connection come and go.
FD_TOLERANCE = 2
MINE_TIMEOUT_SECS = 120
ERROR_CODE = re.compile(rb'"code"\s*:\s*(-?\d+)')
REPLY_ID = re.compile(rb'"id"\s*:\s*(\d+)')
SERVER_BUSY = -102
DRAIN_SILENCE_SECS = 2.0
# Upper bounds on every count, so no flag turns this into an unbounded flood.
BOUNDS = {
    "big_sessions": 1000,
    "big_batch": 10_000,
    "history_sessions": 1000,
    "history_batch": 10_000,
    "partial_sessions": 2000,
    "partial_bytes": 16 << 20,
    "sub_sessions": 100,
    "sub_per_session": 1_000_000,
    "sub_batch": 10_000,
    "idle_conns": 10_000,
    "amp_sessions": 1000,
    "vanish_sessions": 1000,
    "vanish_scripts": 10_000,
    "half_close_conns": 5000,
    "pipeline_requests": 1_000_000,
    "pipeline_heavy_every": 1_000_000,
    "discover_txs": 100_000,
    "phase_secs": 3600,
    "amp_secs": 3600,
    "pipeline_secs": 3600,
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


async def drain(sock, deadline, record, silence_secs=DRAIN_SILENCE_SECS):
    """Reads what the server sent `sock` until it closes, `deadline`, or
    `silence_secs` without a byte (None: no such limit): byte count, error
    codes seen, and whether it was closed."""
    loop = asyncio.get_running_loop()
    record.setdefault("bytes_received", 0)
    record.setdefault("codes", {})
    tail = b""
    try:
        while now() < deadline:
            # Seconds of silence: the server holds nothing more for us (or is
            # still building it; the report says what arrived in time).
            left = deadline - now()
            wait = max(0.01, left if silence_secs is None else min(silence_secs, left))
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
    calls = [("blockchain.block.headers", [0, args.big_count])] * args.big_batch
    return await unread_batches(ctx, deadline, "hostile-big-replies", args.big_sessions, calls, json.dumps)


async def phase_big_histories(ctx, deadline):
    args = ctx.args
    calls = [("blockchain.scripthash.get_history", [ctx.big_scripthash])] * args.history_batch
    return await unread_batches(ctx, deadline, "hostile-big-histories", args.history_sessions, calls, compact_json)


def compact_json(payload):
    """JSON without spaces, as a client packing a line would (3,949
    get_history requests are then 581 KiB)."""
    return json.dumps(payload, separators=(",", ":"))


async def unread_batches(ctx, deadline, client_name, sessions, calls, encode):
    """`sessions` sessions each subscribe to headers and send one batch of
    `calls` ([(method, params)]) with a tiny receive buffer, and read nothing
    until the phase ends; then what they were sent is drained."""
    args = ctx.args
    pool = RawPool()
    records = [{} for _ in range(sessions)]
    batch = (
        encode(
            [
                {"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params}
                for i, (method, params) in enumerate(calls)
            ]
        )
        + "\n"
    ).encode()
    # Subscribed to headers, so a block mined meanwhile queues a notification
    # behind the replies the session does not read.
    subscribe = request_line(len(calls) + 1, "blockchain.headers.subscribe", [])

    async def attack(record):
        try:
            sock = await pool.connect(ctx.addr, rcvbuf=args.hostile_rcvbuf)
            record["sock"] = sock
            await asyncio.get_running_loop().sock_sendall(sock, version_line(client_name) + subscribe + batch)
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


# Kinds of half-way closes, in the order connections take them. A FIN is
# shutdown(SHUT_WR): the socket is then read until the server closes it.
HALF_CLOSE_KINDS = ["fin-mid-line", "rst-mid-line", "fin-pending", "rst-pending"]
HALF_CLOSE_TLS_KINDS = ["tls-fin", "tls-rst"]
HALF_CLOSE_WS_KINDS = ["ws-fin", "ws-rst"]
# How long vanish sessions stay after a block is mined: the server polls its
# node every second, then indexes the block and notifies.
VANISH_HOLD_AFTER_BLOCK_SECS = 3.0
VANISH_HOLD_SECS = 2.0


def half_close_plan(count, tls, ws):
    """The kind of each of `count` connections: every kind in turn, the TLS
    and WebSocket ones only when there is such a listener."""
    kinds = HALF_CLOSE_KINDS + (HALF_CLOSE_TLS_KINDS if tls else []) + (HALF_CLOSE_WS_KINDS if ws else [])
    return [kinds[i % len(kinds)] for i in range(count)]


def closes_with_rst(kind):
    return kind.startswith("rst-") or kind.endswith("-rst")


def tls_partial_client_hello():
    """The first 43 bytes of a TLS ClientHello whose record announces 512:
    a server waits for the rest of the handshake."""
    announced = 512
    handshake = b"\x01" + (announced - 4).to_bytes(3, "big") + b"\x03\x03" + bytes(range(32))
    return b"\x16\x03\x01" + announced.to_bytes(2, "big") + handshake


def ws_upgrade_request(addr):
    key = base64.b64encode(b"osprey-hostile-1").decode()
    return (
        f"GET / HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def ws_partial_frame(payload, announced):
    """A client's (masked) text frame that announces `announced` payload
    bytes (126..65535) but carries only `payload`."""
    if not len(payload) < announced <= 0xFFFF or announced < 126:
        raise ValueError(f"announced {announced} must be in 126..65535 and above {len(payload)}")
    mask = b"\x5a\xa5\x3c\xc3"
    header = bytes([0x81, 0x80 | 126]) + announced.to_bytes(2, "big") + mask
    return header + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def reset(sock):
    """Closes `sock` with a TCP RST rather than a FIN (SO_LINGER on, 0 s)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def vanish_assignment(pool, sessions, per_session):
    """The script hashes each vanish session subscribes: `per_session`
    distinct ones each, taken in turn from `pool` (deduplicated) so that
    sessions share none while the pool lasts. A pool smaller than
    `per_session` is padded with made-up script hashes; returns
    (assignment, how many were made up)."""
    real = list(dict.fromkeys(pool))
    made_up = max(0, per_session - len(real))
    real += [hashlib.sha256(f"hostile-vanish-{i}".encode()).hexdigest() for i in range(made_up)]
    assignment = [[real[(s * per_session + k) % len(real)] for k in range(per_session)] for s in range(sessions)]
    return assignment, made_up


def pipeline_request(request_id, heavy, tip, heavy_every):
    """Request `request_id` (1-based) of the pipeline: a headers subscription
    first, so a mined block interleaves a notification; every
    `heavy_every`th a long history (from `heavy`, in turn); else a header."""
    if request_id == 1:
        return request_line(request_id, "blockchain.headers.subscribe", [])
    if heavy and request_id % heavy_every == 0:
        scripthash = heavy[(request_id // heavy_every) % len(heavy)]
        return request_line(request_id, "blockchain.scripthash.get_history", [scripthash])
    return request_line(request_id, "blockchain.block.header", [request_id % (tip + 1)])


def reply_id(line):
    """The id of a JSON-RPC reply line; None for a notification or garbage.
    Looks at the line's ends first, so a 2 MB history is not parsed for it."""
    for end in (line[-64:], line[:64]):
        match = REPLY_ID.search(end)
        if match:
            return int(match.group(1))
    try:
        message = json.loads(line)
    except ValueError:
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, int) else None


async def phase_vanish(ctx, deadline):
    args = ctx.args
    pool = RawPool()
    loop = asyncio.get_running_loop()
    assignment, made_up = vanish_assignment(ctx.script_pool, args.vanish_sessions, args.vanish_scripts)
    records = [{} for _ in assignment]
    started = now()

    async def subscribe(record, scripthashes):
        try:
            sock = await pool.connect(ctx.addr)
            record["sock"] = sock
            lines = b"".join(
                request_line(i + 1, "blockchain.scripthash.subscribe", [sh]) for i, sh in enumerate(scripthashes)
            )
            sent_at = now()
            await loop.sock_sendall(sock, version_line("hostile-vanish") + lines)
            record["sent"] = True
            # The first bytes back say the server took the session on; the
            # rest is left unread.
            first = await asyncio.wait_for(loop.sock_recv(sock, 4096), CONNECT_TIMEOUT)
            record["first_reply_ms"] = round((now() - sent_at) * 1000, 1)
            count_codes(record.setdefault("codes", {}), first)
        except (OSError, asyncio.TimeoutError) as exc:
            record["error"] = type(exc).__name__

    try:
        await run_until(deadline, [bounded(50, [subscribe(r, shs) for r, shs in zip(records, assignment)])])
        if ctx.mining is not None:
            await asyncio.wait([ctx.mining], timeout=max(0.0, deadline - now()))
            hold = VANISH_HOLD_AFTER_BLOCK_SECS
        else:
            hold = VANISH_HOLD_SECS
        await asyncio.sleep(max(0.0, min(hold, deadline - now())))
        held_secs = now() - started
        for record in records:
            if "sock" in record:
                reset(record.pop("sock"))
        await asyncio.sleep(max(0.0, deadline - now()))
    finally:
        pool.close()
    sent = sum(1 for r in records if r.get("sent"))
    answered = sorted(r["first_reply_ms"] for r in records if "first_reply_ms" in r)
    distinct = len({sh for shs in assignment for sh in shs})
    codes = merge_codes(records)
    notes = (
        f"{sent}/{len(records)} sessions sent {args.vanish_scripts} subscriptions each "
        f"({distinct:,} distinct script hashes, {made_up} made up); "
        + (f"first reply median {answered[len(answered) // 2]:.0f} ms, " if answered else "no first reply, ")
        + f"{len(answered)} answered; reset (RST) after {held_secs:.1f} s unread; error codes {describe_codes(codes)}"
    )
    return notes, {
        "sessions": records,
        "distinct_scripthashes": distinct,
        "made_up": made_up,
        "sent": sent,
        "held_secs": held_secs,
        "codes": codes,
    }


async def phase_half_close(ctx, deadline):
    args = ctx.args
    pool = RawPool()
    loop = asyncio.get_running_loop()
    plan = half_close_plan(args.half_close_conns, ctx.tls_addr is not None, ctx.ws_addr is not None)
    records = [{"kind": kind} for kind in plan]
    heavy_request = request_line(1, "blockchain.scripthash.get_history", [ctx.big_scripthash])
    unfinished_request = heavy_request[: len(heavy_request) // 2]

    async def upgrade_ws(sock, record):
        await loop.sock_sendall(sock, ws_upgrade_request(ctx.ws_addr))
        response = b""
        while b"\r\n\r\n" not in response and len(response) < 8192:
            data = await asyncio.wait_for(loop.sock_recv(sock, 4096), CONNECT_TIMEOUT)
            if not data:
                break
            response += data
        record["upgrade_status"] = response.split(b"\r\n", 1)[0].decode("utf-8", "replace")

    async def close_half_way(record):
        kind = record["kind"]
        try:
            if kind.startswith("tls-"):
                sock = await pool.connect(ctx.tls_addr)
                payload = tls_partial_client_hello()
            elif kind.startswith("ws-"):
                sock = await pool.connect(ctx.ws_addr)
                await upgrade_ws(sock, record)
                payload = ws_partial_frame(version_line("hostile-half-close"), 1000)
            else:
                sock = await pool.connect(ctx.addr)
                ending = heavy_request if kind.endswith("-pending") else unfinished_request
                payload = version_line("hostile-half-close") + ending
            await loop.sock_sendall(sock, payload)
            record["sent"] = True
        except (OSError, asyncio.TimeoutError) as exc:
            record["error"] = type(exc).__name__
            return
        if closes_with_rst(kind):
            reset(sock)
            return
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            record["error"] = type(exc).__name__
            return
        half_closed_at = now()
        # What the server still sends, and whether it closes its side too.
        await drain(sock, deadline, record, silence_secs=None)
        if record.get("closed_by_server"):
            record["server_closed_after_secs"] = round(now() - half_closed_at, 2)

    try:
        await run_until(deadline, [bounded(50, [close_half_way(r) for r in records])])
        await asyncio.sleep(max(0.0, deadline - now()))
    finally:
        pool.close()
    by_kind = {}
    for record in records:
        kind = by_kind.setdefault(
            record["kind"], {"conns": 0, "sent": 0, "errors": 0, "closed_by_server": 0, "bytes_received": 0}
        )
        kind["conns"] += 1
        kind["sent"] += 1 if record.get("sent") else 0
        kind["errors"] += 1 if "error" in record else 0
        kind["bytes_received"] += record.get("bytes_received", 0)
        if "server_closed_after_secs" in record:
            kind["closed_by_server"] += 1
            kind["slowest_close_secs"] = max(kind.get("slowest_close_secs", 0.0), record["server_closed_after_secs"])
    parts = []
    for name, kind in by_kind.items():
        part = f"{name} {kind['sent']}/{kind['conns']}"
        if not closes_with_rst(name):
            part += f" (server closed {kind['closed_by_server']}"
            if "slowest_close_secs" in kind:
                part += f", slowest {kind['slowest_close_secs']:.1f} s"
            part += f", {kind['bytes_received'] / 1e6:.1f} MB back)"
        parts.append(part)
    codes = merge_codes(records)
    notes = "sent: " + "; ".join(parts) + f"; error codes {describe_codes(codes)}"
    return notes, {"connections": records, "by_kind": by_kind, "codes": codes}


async def phase_pipeline(ctx, deadline):
    args = ctx.args
    count = args.pipeline_requests
    heavy = [sh for sh, _ in ctx.heavy[:2]]
    payload = b"".join(pipeline_request(i, heavy, ctx.tip, args.pipeline_heavy_every) for i in range(1, count + 1))
    record = {"requests": count, "request_bytes": len(payload), "replies": 0, "notifications": 0, "bytes_in": 0}
    record["codes"] = {}
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(ctx.addr[0], ctx.addr[1], limit=READ_LIMIT), CONNECT_TIMEOUT
        )
    except (OSError, asyncio.TimeoutError) as exc:
        return f"could not connect: {type(exc).__name__}", record
    started = now()
    expected = 0
    try:
        # Everything at once, nothing awaited: the transport buffers it and
        # the kernel sends it as fast as the server reads.
        writer.write(version_line("hostile-pipeline") + payload)
        while expected <= count:
            line = await asyncio.wait_for(reader.readline(), max(0.01, deadline - now()))
            if not line:
                record["closed_by_server"] = True
                break
            record["bytes_in"] += len(line)
            request_id = reply_id(line)
            if request_id is None:
                record["notifications"] += 1
                continue
            if request_id != expected and "out_of_order" not in record:
                record["out_of_order"] = {"expected": expected, "got": request_id}
            if request_id == 0:
                record["first_reply_secs"] = round(now() - started, 3)
            expected = request_id + 1
            record["replies"] += 1 if request_id > 0 else 0
            # Error replies are short; a history is not searched for one.
            if len(line) < 4096 and b'"error"' in line:
                count_codes(record["codes"], line)
    except asyncio.TimeoutError:
        record["timed_out"] = True
    except (OSError, ValueError) as exc:
        record["closed_by_server"] = True
        record["error"] = type(exc).__name__
    finally:
        writer.close()
    elapsed = max(0.001, now() - started)
    record["elapsed_secs"] = round(elapsed, 2)
    order = (
        "in order"
        if "out_of_order" not in record
        else f"OUT OF ORDER (id {record['out_of_order']['got']} where {record['out_of_order']['expected']} was due)"
    )
    notes = (
        f"{count:,} requests ({len(payload) / 1e6:.1f} MB, every {args.pipeline_heavy_every}th a "
        f"{ctx.heavy[0][1] if ctx.heavy else '?'}-tx or smaller history) written at once; "
        f"{record['replies']:,} replies {order}, {record['notifications']} notifications, "
        f"{record['bytes_in'] / 1e9:.2f} GB in {elapsed:.1f} s ({record['bytes_in'] / elapsed / 1e6:.0f} MB/s)"
        + ("; TIMED OUT" if record.get("timed_out") else "")
        + ("; closed by server" if record.get("closed_by_server") else "")
        + f"; error codes {describe_codes(record['codes'])}"
    )
    return notes, record


PHASE_FUNCTIONS = {
    "amplification": phase_amplification,
    "vanish": phase_vanish,
    "half-close": phase_half_close,
    "pipeline": phase_pipeline,
    "big-replies": phase_big_replies,
    "big-histories": phase_big_histories,
    "partial-lines": phase_partial_lines,
    "subscriptions": phase_subscriptions,
    "idle-flood": phase_idle_flood,
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


async def probe_loop(addr, stop, probes):
    """Until `stop` is set: every second a fresh connection negotiates
    server.version; appends (sent_at, latency_ms or None, error or None) to
    `probes`. A slow probe does not delay the next one."""
    running = set()

    async def probe():
        start = now()
        try:
            client = await Client.open(addr, "osprey-hostile-probe")
            client.close()
            probes.append((start, (now() - start) * 1000.0, None))
        except (OSError, asyncio.TimeoutError, RpcError, Closed) as exc:
            probes.append((start, None, error_kind(exc)))

    next_tick = now()
    while not stop.is_set():
        task = asyncio.ensure_future(probe())
        running.add(task)
        task.add_done_callback(running.discard)
        next_tick += PROBE_INTERVAL_SECS
        await asyncio.sleep(max(0.0, next_tick - now()))
    await asyncio.gather(*running, return_exceptions=True)


def wallet_process(addr, scripthashes, interval, timeout, stop, ready, connection):
    """Entry point of the wallet's own process (the wallet and the probes):
    sends their samples back when stopped."""
    samples = []
    probes = []
    # Ctrl-C is the parent's to handle; it stops this process through `stop`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def wallet_and_probes():
        await asyncio.gather(
            wallet_loop(tuple(addr), scripthashes, interval, timeout, stop, ready, samples),
            probe_loop(tuple(addr), stop, probes),
        )

    try:
        asyncio.run(wallet_and_probes())
    finally:
        connection.send((samples, probes))
        connection.close()


# ------------------------------------------------------------------- sampling


def parse_status(text):
    """VmRSS (KiB) and Threads from the text of /proc/PID/status."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS"), fields.get("Threads")


def cpu_ticks(stat_text):
    """utime + stime (clock ticks) from the text of /proc/PID/stat. The
    command name, in parentheses, may hold spaces: fields count from after it."""
    fields = stat_text[stat_text.rindex(")") + 2 :].split()
    # Fields 14 and 15 of stat(5); the text after ")" starts at field 3.
    return int(fields[11]) + int(fields[12])


class Sample:
    __slots__ = ("t", "rss_kib", "threads", "fds", "cpu_ticks")

    def __init__(self, t, rss_kib, threads, fds, ticks):
        self.t = t
        self.rss_kib = rss_kib
        self.threads = threads
        self.fds = fds
        self.cpu_ticks = ticks


class ProcSampler(threading.Thread):
    """Samples a process's RSS, threads, open fds and CPU time every 100 ms,
    in a thread of its own so a busy event loop does not skip samples."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.samples = []
        self.stopped = threading.Event()
        self.gone_at = None

    def read(self):
        with open(f"/proc/{self.pid}/status") as status:
            rss_kib, threads = parse_status(status.read())
        with open(f"/proc/{self.pid}/stat") as stat:
            ticks = cpu_ticks(stat.read())
        fds = len(os.listdir(f"/proc/{self.pid}/fd"))
        return Sample(now(), rss_kib, threads, fds, ticks)

    def run(self):
        while not self.stopped.is_set():
            try:
                self.samples.append(self.read())
            except (OSError, ValueError, IndexError):
                self.gone_at = now()
                return
            self.stopped.wait(0.1)


def peak(samples, field, start, end):
    values = [getattr(s, field) for s in samples if start <= s.t <= end and getattr(s, field) is not None]
    return max(values) if values else None


def last_before(samples, field, t):
    value = None
    for sample in samples:
        if sample.t > t:
            break
        value = getattr(sample, field)
    return value


def settle_secs(samples, field, end, limit, level):
    """Seconds after `end` until `field` was back within FD_TOLERANCE of
    `level` (None if not by `limit`)."""
    if level is None:
        return None
    for sample in samples:
        if end <= sample.t <= limit and getattr(sample, field) <= level + FD_TOLERANCE:
            return sample.t - end
    return None


def cpu_percent(samples, start, end, hertz):
    """The process's CPU time over [start, end] as a percentage of one core."""
    first, last = None, None
    for sample in samples:
        if sample.t < start:
            continue
        if sample.t > end:
            break
        if first is None:
            first = sample
        last = sample
    if first is None or last is None or last.t <= first.t:
        return None
    return (last.cpu_ticks - first.cpu_ticks) / hertz / (last.t - first.t) * 100.0


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


def probe_stats(probes, start, end):
    """The probes sent in [start, end): how many, how many were served
    within PROBE_BAR_MS, the slowest served, and errors by kind."""
    window = [p for p in probes if start <= p[0] < end]
    latencies = [p[1] for p in window if p[1] is not None]
    errors = {}
    for p in window:
        if p[2] is not None:
            errors[p[2]] = errors.get(p[2], 0) + 1
    return {
        "sent": len(window),
        "served": len(latencies),
        "within_bar": sum(1 for ms in latencies if ms <= PROBE_BAR_MS),
        "max_ms": max(latencies) if latencies else None,
        "errors": errors,
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
        # The port opens before the demo's index is built: wait until a
        # script question is answered, not only for the port.
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.settimeout(5)
                sock.sendall(request_line(0, "blockchain.scripthash.get_balance", ["00" * 32]))
                answer = sock.makefile("rb").readline()
                if answer and "error" not in json.loads(answer):
                    log(f"demo serving on 127.0.0.1:{port} (pid {process.pid})")
                    return process, ("127.0.0.1", port), os.path.join(demo_dir, "chain", "manifest.json")
        except (OSError, ValueError):
            pass
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


# Transactions asked for per block when sampling the chain's outputs.
SAMPLE_PER_BLOCK = 50
# The most frequent sampled scripts whose histories are measured.
HEAVY_CANDIDATES = 50
HEAVY_KEPT = 4
OP_RETURN = 0x6A


def sample_heights(tip, sample_txs):
    """Heights, spread evenly over 1..tip, that give about `sample_txs`
    transactions at SAMPLE_PER_BLOCK each."""
    wanted = max(1, -(-sample_txs // SAMPLE_PER_BLOCK))
    if tip < 1:
        return [tip]
    return sorted({1 + (tip - 1) * k // max(1, wanted - 1) for k in range(wanted)})


async def discover(addr, manifest_path, big_scripthash, wallet_count, sample_txs, secs):
    """Script hashes for the wallet (used ones from the manifest), the
    longest histories (among the manifest's wallet and the outputs of
    transactions sampled from the chain through the server), and a pool of
    real script hashes (the manifest's used ones, then the sampled outputs)."""
    deadline = now() + secs
    wallet = []
    histories = {}
    pool = []
    if manifest_path and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        for address in manifest.get("wallet", {}).get("addresses", []):
            histories[address["scripthash"]] = len(address.get("history", []))
        used = sorted((h for h in histories.items() if h[1] > 0), key=lambda h: h[0])
        wallet = [sh for sh, _ in used[:wallet_count]]
        pool = [sh for sh, _ in used]
        log(f"manifest {manifest_path}: {len(histories)} wallet script hashes")
    client = await Client.open(addr, "hostile-discovery")
    try:
        tip = (await client.call("blockchain.headers.subscribe", [], 10))["height"]
        counts = {}
        for height in sample_heights(tip, sample_txs):
            if now() > deadline:
                log(f"discovery: sampling stopped at its {secs} s cap")
                break
            replies = await client.batch(
                [("blockchain.transaction.id_from_pos", [height, pos]) for pos in range(SAMPLE_PER_BLOCK)], 30
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
                    if script[:1] == bytes([OP_RETURN]):
                        continue
                    sh = hashlib.sha256(script).digest()[::-1].hex()
                    counts[sh] = counts.get(sh, 0) + 1
        pool += [sh for sh in counts if sh not in histories]
        candidates = sorted(counts, key=counts.get, reverse=True)[:HEAVY_CANDIDATES]
        if big_scripthash is not None:
            candidates.append(big_scripthash)
        # One at a time: a batch of long histories passes the server's reply cap.
        for sh in candidates:
            if now() > deadline:
                break
            try:
                histories[sh] = len(await client.call("blockchain.scripthash.get_history", [sh], 60))
            except RpcError as exc:
                log(f"discovery: get_history {sh}: {exc}")
        heavy = sorted(histories.items(), key=lambda h: h[1], reverse=True)[:HEAVY_KEPT]
        if big_scripthash is None and heavy:
            big_scripthash = heavy[0][0]
        if not wallet:
            ordinary = sorted((sh for sh, n in histories.items() if 0 < n < 50))
            wallet = ordinary[:wallet_count]
        if not wallet:
            wallet = [hashlib.sha256(f"wallet-{i}".encode()).hexdigest() for i in range(wallet_count)]
    finally:
        client.close()
    if big_scripthash is None:
        big_scripthash = wallet[0]
    return {
        "tip": tip,
        "wallet": wallet,
        "big_scripthash": big_scripthash,
        "big_history_len": histories.get(big_scripthash),
        "heavy": heavy,
        "pool": pool,
        "sampled_outputs": sum(counts.values()),
    }


# ------------------------------------------------------------------------ run


class Context:
    def __init__(self, args, addr, pid, found):
        self.args = args
        self.addr = addr
        self.pid = pid
        self.tls_addr = args.tls_server
        self.ws_addr = args.ws_server
        self.tip = found["tip"]
        self.wallet_scripthashes = found["wallet"]
        self.big_scripthash = found["big_scripthash"]
        self.big_history_len = found["big_history_len"]
        # [(script hash, history length)], longest first.
        self.heavy = found["heavy"]
        self.script_pool = found["pool"]
        # The task mining this phase's block, if it mines one.
        self.mining = None


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


def phase_duration(args, name):
    return {"amplification": args.amp_secs, "pipeline": args.pipeline_secs}.get(name, args.phase_secs)


async def mine_block(command, at, phase_start):
    """Runs the --mine-cmd shell command at `at`; what it did, for the report."""
    await asyncio.sleep(max(0.0, at - now()))
    started = now()
    record = {"at_secs": round(started - phase_start, 2)}
    process = await asyncio.create_subprocess_shell(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), MINE_TIMEOUT_SECS)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        record["error"] = f"timed out after {MINE_TIMEOUT_SECS} s"
        return record
    record["secs"] = round(now() - started, 2)
    record["exit"] = process.returncode
    record["output"] = output.decode("utf-8", "replace").strip()[-300:]
    return record


def describe_mining(record):
    if "error" in record or record.get("exit") != 0:
        return f"mining FAILED at +{record['at_secs']:.1f} s ({record.get('error') or record.get('output')})"
    return f"block mined at +{record['at_secs']:.1f} s"


async def run_phases(ctx, phases):
    args = ctx.args
    rows = []
    for name in phases:
        start = now()
        threads_at_start = thread_times(ctx.pid)
        log(f"phase {name} starts")
        notes, raw, mined = "", {}, None
        if name == "baseline":
            await asyncio.sleep(args.baseline_secs)
        elif name == "after":
            notes = await check_fresh_session(ctx.addr, ctx.wallet_scripthashes[0])
        else:
            secs = phase_duration(args, name)
            if args.mine_cmd and name in MINING_PHASES:
                at = start + min(args.mine_after_secs, secs / 2)
                ctx.mining = asyncio.ensure_future(mine_block(args.mine_cmd, at, start))
            deadline = start + secs
            cap = secs + args.drain_secs + 30 + (args.newcomer_cap_secs if name == "idle-flood" else 0)
            try:
                notes, raw = await asyncio.wait_for(PHASE_FUNCTIONS[name](ctx, deadline), cap)
            except asyncio.TimeoutError:
                notes = f"phase cut at its {cap:.0f} s cap"
            if ctx.mining is not None:
                mined = await ctx.mining
                ctx.mining = None
                notes += f"; {describe_mining(mined)}"
        end = now()
        threads_at_end = thread_times(ctx.pid)
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
                "load_1m": load_average(),
                "thread_cpu_ticks": thread_cpu_ticks(threads_at_start, threads_at_end),
                "threads_by_name": threads_by_name(thread_times(ctx.pid)),
                "notes": notes,
                "mined": mined,
                "hostile": raw,
            }
        )
        log(f"phase {name}: {notes}")
    return rows


def thread_times(pid):
    """{thread id: (name, CPU ticks)} of the process's threads."""
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return threads
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = comm.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                threads[tid] = (name, cpu_ticks(stat.read()))
        except (OSError, ValueError, IndexError):
            # The thread ended between the listing and the read.
            continue
    return threads


def threads_by_name(threads):
    """How many threads bear each name: which pool grew."""
    counts = {}
    for name, _ in threads.values():
        counts[name] = counts.get(name, 0) + 1
    return counts


def thread_cpu_ticks(before, after):
    """CPU ticks each thread name used between two thread_times: which
    threads did the work. Threads started in between count from zero; those
    that ended in between are lost."""
    used = {}
    for tid, (name, ticks) in after.items():
        used[name] = used.get(name, 0) + ticks - before.get(tid, (name, 0))[1]
    return used


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def process_stats(samples, start, end, rest_end, hertz):
    """The server's figures for a phase that ran over [start, end] and
    rested until `rest_end`."""
    fds_before = last_before(samples, "fds", start)
    settle = settle_secs(samples, "fds", end, rest_end, fds_before)
    return {
        "rss_start_kib": last_before(samples, "rss_kib", start),
        "rss_peak_kib": peak(samples, "rss_kib", start, rest_end),
        "rss_rest_kib": last_before(samples, "rss_kib", rest_end),
        "fds_before": fds_before,
        "fds_peak": peak(samples, "fds", start, rest_end),
        "fds_after": last_before(samples, "fds", rest_end),
        "fds_settle_secs": settle,
        "threads_before": last_before(samples, "threads", start),
        "threads_after": last_before(samples, "threads", rest_end),
        "cpu_percent": cpu_percent(samples, start, end, hertz),
    }


def mib(kib):
    return f"{kib / 1024:.0f}" if kib is not None else "-"


def ms(value):
    return f"{value:.1f}" if value is not None else "-"


def count(value):
    return str(value) if value is not None else "-"


def error_detail(errors):
    detail = ", ".join(f"{n}x {k}" for k, n in sorted(errors.items()))
    return f" [{detail}]" if detail else ""


def fds_cell(server, rested):
    cell = f"{count(server['fds_before'])}/{count(server['fds_peak'])}/{count(server['fds_after'])}"
    if server["fds_settle_secs"] is not None:
        return cell + f" (back in {server['fds_settle_secs']:.1f} s)"
    return cell + (" (not back)" if rested else "")


def probes_cell(probes):
    return (
        f"{probes['served']}/{probes['sent']} ({probes['within_bar']} ≤1 s, max {ms(probes['max_ms'])})"
        + error_detail(probes["errors"])
    )


def markdown(rows):
    """One row a phase: each row has "phase", "notes", "rested", and the
    dicts "server" (process_stats), "wallet" (wallet_stats) and "probes"
    (probe_stats)."""
    lines = [
        "| phase | peak RSS MiB | resting RSS MiB | wallet p50 ms | wallet p99 ms | wallet max ms "
        "| wallet errors/requests (busy) | probes served/sent (≤1 s, max ms) | server fds before/peak/after "
        "| threads before/after | server CPU % | load 1 min | notes |",
        "|---|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|---|",
    ]
    for row in rows:
        server, w, probes = row["server"], row["wallet"], row["probes"]
        cpu = server["cpu_percent"]
        load = row.get("load_1m")
        lines.append(
            f"| {row['phase']} | {mib(server['rss_peak_kib'])} | {mib(server['rss_rest_kib'])} | {ms(w['p50_ms'])} "
            f"| {ms(w['p99_ms'])} | {ms(w['max_ms'])} "
            f"| {sum(w['errors'].values())}/{w['requests']} ({w['busy']}){error_detail(w['errors'])} "
            f"| {probes_cell(probes)} "
            f"| {fds_cell(server, row['rested'])} "
            f"| {count(server['threads_before'])}/{count(server['threads_after'])} "
            f"| {f'{cpu:.0f}' if cpu is not None else '-'} | {f'{load:.2f}' if load is not None else '-'} "
            f"| {row['notes']} |"
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
    target.add_argument("--tls-server", type=loopback_addr, help="the server's TLS port, for half-close")
    target.add_argument("--ws-server", type=loopback_addr, help="the server's WebSocket port, for half-close")
    target.add_argument("--mine-cmd", help="shell command mining one block on the server's node")
    target.add_argument("--mine-after-secs", type=float, default=5, help="into each mining phase (at most half of it)")
    target.add_argument("--discover-txs", type=int, default=10_000, help="transactions sampled for real script hashes")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of: " + ", ".join(PHASES))
    parser.add_argument("--phase-secs", type=float, default=20)
    parser.add_argument("--rest-secs", type=float, default=10, help="wait after each phase before reading resting RSS")
    parser.add_argument("--baseline-secs", type=float, default=5)
    parser.add_argument("--drain-secs", type=float, default=5, help="reading what unread sessions were sent")
    parser.add_argument("--wallet-interval-ms", type=float, default=100)
    parser.add_argument("--wallet-timeout-secs", type=float, default=10)
    parser.add_argument("--wallet-scripthashes", type=int, default=5)
    parser.add_argument("--big-sessions", type=int, default=600)
    parser.add_argument("--big-batch", type=int, default=200)
    parser.add_argument("--big-count", type=int, default=2016)
    parser.add_argument("--history-sessions", type=int, default=600)
    parser.add_argument("--history-batch", type=int, default=3949)
    parser.add_argument(
        "--hostile-rcvbuf", type=int, default=4096, help="SO_RCVBUF of big-replies and big-histories sessions"
    )
    parser.add_argument("--partial-sessions", type=int, default=300)
    parser.add_argument("--partial-bytes", type=int, default=999_000)
    parser.add_argument("--sub-sessions", type=int, default=8)
    parser.add_argument("--sub-per-session", type=int, default=50_000)
    parser.add_argument("--sub-batch", type=int, default=200)
    parser.add_argument("--idle-conns", type=int, default=1000)
    parser.add_argument("--newcomer-cap-secs", type=float, default=90)
    parser.add_argument("--amp-sessions", type=int, default=50)
    parser.add_argument("--amp-secs", type=float, default=10)
    parser.add_argument("--vanish-sessions", type=int, default=100)
    parser.add_argument("--vanish-scripts", type=int, default=200, help="subscriptions per vanish session")
    parser.add_argument("--half-close-conns", type=int, default=300)
    parser.add_argument("--pipeline-requests", type=int, default=10_000)
    parser.add_argument("--pipeline-heavy-every", type=int, default=20)
    parser.add_argument("--pipeline-secs", type=float, default=120, help="bound on writing and reading the pipeline")
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
    open_files = raise_open_files(
        max(2500, args.idle_conns + max(args.big_sessions, args.history_sessions) + args.half_close_conns + 1000)
    )
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
        found = asyncio.run(
            discover(addr, manifest, args.big_scripthash, args.wallet_scripthashes, args.discover_txs, 300)
        )
        log(
            f"tip {found['tip']}; wallet script hashes {len(found['wallet'])}; amplification target "
            f"{found['big_scripthash']} ({found['big_history_len']} txs); longest histories "
            + ", ".join(f"{sh[:12]}.. {n}" for sh, n in found["heavy"])
            + f"; {len(found['pool']):,} real script hashes for vanish"
        )
        sampler = ProcSampler(pid)
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
        ctx = Context(args, addr, pid, found)
        try:
            rows = asyncio.run(run_phases(ctx, ["baseline"] + args.phase_list + ["after"]))
        finally:
            stop.set()
            # Probes still connecting may take CONNECT_TIMEOUT twice.
            samples, probes = (
                receive.recv() if receive.poll(args.wallet_timeout_secs + 2 * CONNECT_TIMEOUT + 10) else ([], [])
            )
            wallet.join(10)
        sampler.stopped.set()
        if sampler.gone_at is not None:
            warnings.append("the server's process ended during the run")
        hertz = os.sysconf("SC_CLK_TCK")
        for row in rows:
            row["server"] = process_stats(sampler.samples, row["start"], row["end"], row["rest_end"], hertz)
            row["rested"] = row["rest_end"] > row["end"]
            row["wallet"] = wallet_stats(samples, row["start"], row["end"])
            row["wallet_rest"] = wallet_stats(samples, row["end"], row["rest_end"])
            row["probes"] = probe_stats(probes, row["start"], row["end"])
            row["probes_rest"] = probe_stats(probes, row["end"], row["rest_end"])
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
                "discovery": {**found, "pool": len(found["pool"])},
                "phases": [
                    {**row, "start": row["start"] - t0, "end": row["end"] - t0, "rest_end": row["rest_end"] - t0}
                    for row in rows
                ],
                "process_samples": {
                    "fields": ["t", "rss_kib", "threads", "fds", "cpu_ticks"],
                    "rows": [(round(p.t - t0, 3), p.rss_kib, p.threads, p.fds, p.cpu_ticks) for p in sampler.samples],
                },
                "wallet_samples": [(round(s[0] - t0, 3), s[1], s[2], s[3]) for s in samples],
                "probes": [(round(p[0] - t0, 3), p[1], p[2]) for p in probes],
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
