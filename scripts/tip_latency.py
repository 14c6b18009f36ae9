#!/usr/bin/env python3
"""Tip latency: how long after a new block each Electrum server notifies
its `blockchain.headers.subscribe` subscribers.

Usage (Python 3.8+, standard library only; regtest nodes only, as it
mines blocks):

    BITCOIN_CLI="bitcoin-cli -datadir=DIR -rpcport=PORT" \\
        scripts/tip_latency.py BLOCKS NAME=PORT [NAME=PORT ...]

Subscribes to headers on each server (127.0.0.1:PORT), then BLOCKS times:
mines a block with `generatetodescriptor` and waits up to 30 s for every
server's notification. Prints, per server, the median and the largest
delay from the moment the RPC returned (the node has accepted the block)
and from the moment it was called (mining and the CLI included).
"""
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time


def summary(name, delays):
    """One line on `delays`: (ms after the RPC returned, ms since it was called)."""
    after = [a for a, _ in delays]
    since = [b for _, b in delays]
    return (
        f"{name}: after generatetodescriptor returned: median {statistics.median(after):.1f} ms "
        f"(max {max(after):.1f}); since it was called (includes mining and the CLI): "
        f"median {statistics.median(since):.1f} ms (max {max(since):.1f}); {len(delays)} blocks"
    )


def connect(port):
    conn = socket.create_connection(("127.0.0.1", int(port)))
    stream = conn.makefile("rwb")
    for request in (
        b'{"id":1,"method":"server.version","params":["tiplat","1.4"]}\n',
        b'{"id":2,"method":"blockchain.headers.subscribe","params":[]}\n',
    ):
        stream.write(request)
        stream.flush()
        stream.readline()
    return stream


def wait_for_notification(stream, name, arrived):
    while True:
        message = json.loads(stream.readline())
        if message.get("method") == "blockchain.headers.subscribe":
            arrived[name] = time.monotonic()
            return


def main(argv):
    if len(argv) < 3 or "BITCOIN_CLI" not in os.environ:
        sys.exit("usage: BITCOIN_CLI='bitcoin-cli ARGS' tip_latency.py BLOCKS NAME=PORT ...")
    cli = shlex.split(os.environ["BITCOIN_CLI"])
    blocks = int(argv[1])
    servers = dict(arg.split("=", 1) for arg in argv[2:])
    info = subprocess.check_output(cli + ["getdescriptorinfo", "raw(51)"])
    descriptor = json.loads(info)["descriptor"]
    streams = {name: connect(port) for name, port in servers.items()}
    delays = {name: [] for name in servers}
    for _ in range(blocks):
        arrived = {}
        waiters = [
            # Daemons: a server that never notifies must not keep the tool alive.
            threading.Thread(
                target=wait_for_notification, args=(stream, name, arrived), daemon=True
            )
            for name, stream in streams.items()
        ]
        for waiter in waiters:
            waiter.start()
        asked = time.monotonic()
        subprocess.check_output(cli + ["generatetodescriptor", "1", descriptor])
        accepted = time.monotonic()
        for waiter in waiters:
            waiter.join(30)
        for name in servers:
            if name not in arrived:
                sys.exit(f"{name}: no notification within 30 s")
            delays[name].append(((arrived[name] - accepted) * 1000, (arrived[name] - asked) * 1000))
        # Lets every server settle before the next block.
        time.sleep(0.5)
    for name, measured in delays.items():
        print(summary(name, measured))


if __name__ == "__main__":
    main(sys.argv)
