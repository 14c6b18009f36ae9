#!/usr/bin/env python3
"""Asks an Electrum server a fixed list of questions about a generated
chain (its manifest.json: every block, every wallet script, every wallet
transaction) and writes one line per question: the request, a tab, and the
server's answer exactly as it came (id included). Two servers of the same
chain can be compared with cmp. Stdlib only; loopback; every read bounded.

    electrum_answers.py --port 60401 --manifest DIR/chain/manifest.json --out FILE
"""

import argparse
import json
import socket
import sys
import time


def requests(manifest):
    """The questions, in a fixed order."""
    tip = manifest["tip_height"]
    yield "server.version", ["osprey-answers", "1.4"]
    yield "server.features", []
    yield "server.banner", []
    yield "server.donation_address", []
    yield "server.peers.subscribe", []
    yield "blockchain.headers.subscribe", []
    yield "blockchain.relayfee", []
    yield "blockchain.estimatefee", [2]
    yield "mempool.get_fee_histogram", []
    yield "blockchain.block.headers", [0, tip + 1]
    for height in range(tip + 1):
        yield "blockchain.block.header", [height]
        yield "blockchain.block.header", [height, tip]
    txids = []
    for address in manifest["wallet"]["addresses"]:
        scripthash = address["scripthash"]
        for method in ("subscribe", "get_history", "get_balance", "listunspent", "get_mempool"):
            yield "blockchain.scripthash." + method, [scripthash]
        for txid, height in address["history"]:
            if (txid, height) not in txids:
                txids.append((txid, height))
    for txid, height in txids:
        yield "blockchain.transaction.get", [txid]
        yield "blockchain.transaction.get_merkle", [txid, height]
    for height in range(tip + 1):
        yield "blockchain.transaction.id_from_pos", [height, 0, True]
    # Errors are answers too.
    yield "blockchain.transaction.get", ["00" * 32]
    yield "blockchain.block.header", [tip + 1]
    yield "no.such.method", []


def wallets_served(reader, sock):
    """Whether the server answers a script question without an error: the
    Electrum port opens before the first sync, and until it ends such
    questions get "unavailable index: indexing: height H of N"."""
    request = {"jsonrpc": "2.0", "id": "ready", "method": "blockchain.scripthash.get_balance",
               "params": ["00" * 32]}
    sock.sendall(json.dumps(request).encode() + b"\n")
    answer = reader.readline()
    if not answer.endswith(b"\n"):
        sys.exit("the server closed the connection while indexing")
    return "error" not in json.loads(answer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--wait", type=float, default=300, help="seconds to wait for the port")
    args = parser.parse_args()
    with open(args.manifest) as f:
        manifest = json.load(f)

    deadline = time.monotonic() + args.wait
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", args.port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"nothing listens on 127.0.0.1:{args.port} after {args.wait} s")
            time.sleep(0.5)
    sock.settimeout(60)
    reader = sock.makefile("rb")
    while not wallets_served(reader, sock):
        if time.monotonic() > deadline:
            sys.exit(f"127.0.0.1:{args.port} still indexing after {args.wait} s")
        time.sleep(0.5)
    count = 0
    with open(args.out, "wb") as out:
        for number, (method, params) in enumerate(requests(manifest)):
            request = json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
            sock.sendall(request.encode() + b"\n")
            answer = reader.readline()
            if not answer.endswith(b"\n"):
                sys.exit(f"the server closed the connection at {method} {params}")
            out.write(request.encode() + b"\t" + answer)
            count += 1
    sock.close()
    print(f"{count} answers from 127.0.0.1:{args.port} in {args.out}")


if __name__ == "__main__":
    main()
