#!/usr/bin/env python3
"""The floor of a benchmark client: an Electrum responder that does no work.

Answers `server.version` and every other request at once with a fixed
result (a made-up status for subscriptions), one reply line per request
line, so that a client's time against it is the client's own: encoding
requests, parsing replies, its event loop. No server can be measured below
it with that client. Run the client against it as against a server, e.g.

    python3 scripts/client_floor.py --port 29599 --seconds 120 &
    python3 ../shared/peerlab/walletload.py --server floor=127.0.0.1:29599 \\
        --tests initial --scripthashes /tmp/med/wallet.txt --runs 5 --no-restart

Listens on 127.0.0.1 only and exits after --seconds. The answers are not an
Electrum server's: use it for timing, never to check answers.
"""
import argparse
import json
import socket
import threading
import time

STATUS = "ab" * 32


def answer(message):
    """The reply object for one request object."""
    if not isinstance(message, dict):
        return {"jsonrpc": "2.0", "error": {"code": -32600, "message": "not a request"}, "id": None}
    if message.get("method") == "server.version":
        result = ["client_floor 1.0", "1.4"]
    else:
        result = STATUS
    return {"jsonrpc": "2.0", "result": result, "id": message.get("id")}


def serve(conn):
    # As a real server: small replies leave at once (no Nagle delay).
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn, conn.makefile("rb") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                return
            if isinstance(message, list):
                reply = [answer(m) for m in message]
            else:
                reply = answer(message)
            conn.sendall(json.dumps(reply, separators=(",", ":")).encode() + b"\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=29599)
    ap.add_argument("--seconds", type=float, default=300, help="exit after this long (default 300)")
    a = ap.parse_args()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", a.port))
    listener.listen(16)
    deadline = time.monotonic() + a.seconds
    print(f"client floor responder on 127.0.0.1:{a.port} for {a.seconds:.0f} s", flush=True)
    while time.monotonic() < deadline:
        listener.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            break
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
