"""Tip latency: time from Core's generatetodescriptor returning (the block
accepted) to the blockchain.headers.subscribe notification at each server."""
import json, socket, subprocess, sys, time, statistics, threading

C = ["/work/shared/peers/bin/bitcoin-cli", "-datadir=/work/shared/peerlab/.peerlab-data/m/core",
     "-conf=/work/shared/peerlab/.peerlab-data/m/core/peerlab-bitcoin.conf", "-rpcport=29500"]
desc = json.loads(subprocess.check_output(C + ["getdescriptorinfo", "raw(51)"]))["descriptor"]
servers = dict(a.split("=") for a in sys.argv[2:])
n = int(sys.argv[1])

def connect(port):
    s = socket.create_connection(("127.0.0.1", int(port)))
    f = s.makefile("rwb")
    f.write(b'{"id":1,"method":"server.version","params":["tiplat","1.4"]}\n'); f.flush(); f.readline()
    f.write(b'{"id":2,"method":"blockchain.headers.subscribe","params":[]}\n'); f.flush(); f.readline()
    return f

conns = {name: connect(port) for name, port in servers.items()}
lat = {name: [] for name in servers}
for i in range(n):
    arrived = {}
    def wait(name, f):
        while True:
            line = json.loads(f.readline())
            if line.get("method") == "blockchain.headers.subscribe":
                arrived[name] = time.monotonic()
                return
    threads = [threading.Thread(target=wait, args=(nm, f)) for nm, f in conns.items()]
    for t in threads: t.start()
    asked = time.monotonic()
    subprocess.check_output(C + ["generatetodescriptor", "1", desc])
    accepted = time.monotonic()
    for t in threads: t.join(30)
    for nm in servers:
        lat[nm].append(((arrived[nm] - accepted) * 1000, (arrived[nm] - asked) * 1000))
    time.sleep(0.5)
for nm, xs in lat.items():
    after = [a for a, _ in xs]; since = [b for _, b in xs]
    print(f"{nm}: after generatetodescriptor returned: median {statistics.median(after):.1f} ms (max {max(after):.1f}); "
          f"since it was called (includes mining and the CLI): median {statistics.median(since):.1f} ms (max {max(since):.1f}); {len(xs)} blocks")
