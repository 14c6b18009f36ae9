#!/usr/bin/env python3
"""Fault soak: `osprey serve` on Bitcoin Core regtest, faults injected one
after another at seeded random points for a given time, and after each
recovery the index and the answers checked against a fresh build.

    scripts/soak.py --minutes N [--seed S] [--osprey target/release/osprey]
                    [--bitcoind PATH] [--blocks 600] [--keep]

Faults (one kind after another, in a seeded random order, each at a
seeded random moment):
  osprey-kill9    SIGKILL of osprey while it catches up with freshly mined
                  blocks, or (one time in three) during its first sync of
                  an index started over; then restarted.
  core-kill9      SIGKILL of bitcoind while blocks arrive and osprey
                  follows; restarted after a random pause (a new cookie;
                  Core may have lost its last blocks: osprey follows it
                  back).
  core-restart    bitcoind stopped cleanly (RPC `stop`) and started again.
  core-upgrade    bitcoind stopped and started from a copy of its binary at
                  another path, with other arguments (-dbcache, -par). Only
                  one Core version exists here: the "upgrade" is a new
                  binary path and command line, not a new version.
  rest-off        bitcoind restarted with -rest=0 while blocks arrive, then
                  with -rest=1 again (osprey may be on --block-source rest).
  blk-unreadable  Core's blk/rev files fail every read with EIO for a while
                  (tests/it/eio_shim.c, LD_PRELOAD into osprey), blocks
                  arriving meanwhile; then readable again.
  reorg           the last 1-3 blocks invalidated, more mined on another
                  branch.
  disk-full       the index's own tmpfs filled while blocks arrive, then
                  freed (as tests/it/disk_full.rs).
  eio             osprey restarted with reads or writes of its index
                  failing with EIO (one call in K) while blocks arrive and
                  wallets ask; each wallet answer must be right or an
                  error; then restarted without the faults.
  hostile         scripts/hostile.py phases (bounded, loopback) against
                  the server.

After each fault: osprey must serve Core's tip by itself (within
--recover-secs; restarted only where the fault was osprey's own end), its
wallet answers (scripts/electrum_answers.py) must equal the chaingen
manifest's; then it is stopped with SIGTERM (a clean exit), its index's
digest (`osprey index --digest`) compared with a fresh build's on the same
node, the fresh build's answers compared with the soaked server's byte for
byte, and the soaked server started again. The table at the end counts, per
kind: faults injected, recovered, digest checks, answers checked, and
anything lost (a digest or an answer that differs, a fault not recovered
from, a wrong answer during EIO): all must be 0. It also counts osprey's
"node ... is not answering" lines against Core's outages (one each at
most). Exit status 1 when anything was lost.

Needs root (mount -t tmpfs), cc (the EIO shim) and osprey-tools beside
osprey (chaingen). Everything listens on 127.0.0.1. Processes it started
are stopped by PID, the tmpfs unmounted and the work directory removed at
the end (kept with --keep or on a failure).
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = [
    "osprey-kill9",
    "core-kill9",
    "core-restart",
    "core-upgrade",
    "rest-off",
    "blk-unreadable",
    "reorg",
    "disk-full",
    "eio",
    "hostile",
]
RPC_USER, RPC_PASS = "soak", "soak"
# The coinbase of mined blocks: an anyone-can-spend script no wallet of the
# manifest holds, and another for a reorg's competing branch (descriptor
# checksums are Core's, asked at setup).
MINE_TO = "raw(51)"
MINE_ELSEWHERE = "raw(52)"
START_SECS = 120
# What osprey's log shows when a fault took effect (a kill of osprey and a
# hostile phase always do): the node gone, a reorg followed, the full disk
# met, a source that stopped giving blocks, an I/O error.
EVIDENCE = {
    "core-kill9": "is not answering",
    "core-restart": "is not answering",
    "core-upgrade": "is not answering",
    "rest-off": "REST does not serve block",
    "blk-unreadable": "block files cannot be read",
    "reorg": "chain reorganised",
    "disk-full": "disk full: the index",
    "eio": "Input/output error",
}
LINE_BYTES_MAX = 64 << 20


def log(message):
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Failure(Exception):
    """A check that did not pass: counted as lost, the run goes on."""


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_for(what, timeout, probe, interval=0.2):
    """Polls `probe` until it returns something truthy; Failure at the
    deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def rpcauth(user, password):
    salt = "0123456789abcdef0123456789abcdef"
    mac = hmac.new(salt.encode(), password.encode(), hashlib.sha256).hexdigest()
    return f"{user}:{salt}${mac}"


class Core:
    """bitcoind in regtest on its own datadir and loopback ports."""

    def __init__(self, work, binary):
        self.binary = binary
        self.upgraded = os.path.join(work, "core-upgraded", "bin", "bitcoind")
        os.makedirs(os.path.dirname(self.upgraded))
        shutil.copy2(binary, self.upgraded)
        self.datadir = os.path.join(work, "core")
        os.makedirs(self.datadir)
        self.rpc_port, self.p2p_port = free_ports(2)
        self.log_path = os.path.join(work, "bitcoind.log")
        self.process = None
        self.outages = 0
        self.current = "original"
        self.checksummed = {}

    @property
    def blocks_dir(self):
        return os.path.join(self.datadir, "regtest", "blocks")

    def start(self, rest=True, upgraded=False):
        binary = self.upgraded if upgraded else self.binary
        args = [
            binary, "-regtest", f"-datadir={self.datadir}", f"-rpcport={self.rpc_port}",
            f"-port={self.p2p_port}", f"-bind=127.0.0.1:{self.p2p_port}", "-rpcbind=127.0.0.1",
            "-rpcallowip=127.0.0.1", f"-rpcauth={rpcauth(RPC_USER, RPC_PASS)}",
            f"-rest={int(rest)}", "-server", "-listen", "-dnsseed=0", "-fixedseeds=0",
            "-listenonion=0", "-fallbackfee=0.0002", "-printtoconsole",
        ]
        if upgraded:
            args += ["-dbcache=64", "-par=1", "-maxmempool=100"]
        self.current = "upgraded" if upgraded else "original"
        out = open(self.log_path, "ab")
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        out.close()

        def ready():
            if self.process.poll() is not None:
                raise Failure(f"bitcoind exited with {self.process.returncode} at startup")
            try:
                return self.call("getblockcount") is not None
            except (OSError, Failure):
                return False

        wait_for("bitcoind answers RPC", START_SECS, ready)

    def call(self, method, *params):
        request = json.dumps({"jsonrpc": "1.0", "id": 1, "method": method, "params": list(params)})
        auth = base64.b64encode(f"{RPC_USER}:{RPC_PASS}".encode()).decode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.rpc_port}/", data=request.encode(),
            headers={"Authorization": f"Basic {auth}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as answer:
                reply = json.loads(answer.read(LINE_BYTES_MAX))
        except urllib.error.HTTPError as e:
            reply = json.loads(e.read(LINE_BYTES_MAX) or b"{}")
        if reply.get("error"):
            raise Failure(f"{method}: {reply['error']}")
        return reply.get("result")

    def tip(self):
        info = self.call("getblockchaininfo")
        return info["blocks"], info["bestblockhash"]

    def mine(self, n, descriptor=MINE_TO):
        if descriptor not in self.checksummed:
            self.checksummed[descriptor] = self.call("getdescriptorinfo", descriptor)["descriptor"]
        return self.call("generatetodescriptor", n, self.checksummed[descriptor])

    def kill9(self):
        self.outages += 1
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(60)

    def stop(self):
        self.outages += 1
        try:
            self.call("stop")
        except (OSError, Failure):
            pass
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(60)

    def close(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(60)


class Osprey:
    """`osprey serve` on an index directory, its log kept."""

    def __init__(self, binary, work, core, db, name):
        self.binary, self.core, self.db, self.name = binary, core, db, name
        self.log_path = os.path.join(work, f"{name}.log")
        self.port = None
        self.process = None
        self.source = "auto"

    def start(self, env=None, source="auto"):
        (self.port,) = free_ports(1)
        self.source = source
        args = [
            self.binary, "serve", "--network", "regtest", "--db-dir", self.db,
            "--daemon-dir", self.core.datadir, "--daemon-rpc-addr", f"127.0.0.1:{self.core.rpc_port}",
            "--electrum-rpc-addr", f"127.0.0.1:{self.port}", "--skip-default-conf-files",
            "--block-source", source, "--poll-interval-ms", "500", "--disk-full-retry-max-secs", "2",
        ]
        out = open(self.log_path, "ab")
        out.write(f"=== soak: start, block source {source}, env {sorted((env or {}).items())}\n".encode())
        out.flush()
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env={**os.environ, **(env or {})})
        out.close()

    def running(self):
        return self.process is not None and self.process.poll() is None

    def kill9(self):
        if self.running():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(60)

    def terminate(self):
        """SIGTERM; the exit status (0 for a clean stop)."""
        if self.running():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(60)
            raise Failure(f"{self.name} did not stop within 120 s of SIGTERM")

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_tail(self, n=30):
        return "\n".join(self.log_text().splitlines()[-n:])

    def ask(self, requests, timeout=30):
        """Sends JSON-RPC requests on one connection; their answers."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            lines = "".join(
                json.dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": p}) + "\n"
                for i, (m, p) in enumerate(requests))
            s.sendall(lines.encode())
            reader = s.makefile("rb")
            answers = []
            for _ in requests:
                line = reader.readline(LINE_BYTES_MAX)
                if not line.endswith(b"\n"):
                    raise OSError("connection closed")
                answers.append(json.loads(line))
            return answers

    def serves(self, height, block_hash):
        """Whether it serves wallets at exactly Core's tip."""
        if not self.running():
            raise Failure(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
        try:
            tip, balance = self.ask([
                ("blockchain.headers.subscribe", []),
                ("blockchain.scripthash.get_balance", ["00" * 32]),
            ], timeout=10)
        except (OSError, ValueError):
            return False
        if "error" in balance or "result" not in tip:
            return False
        if tip["result"]["height"] != height:
            return False
        header = bytes.fromhex(tip["result"]["hex"])
        return hashlib.sha256(hashlib.sha256(header).digest()).digest()[::-1].hex() == block_hash


class Soak:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.rng = random.Random(args.seed)
        self.osprey_bin = os.path.abspath(args.osprey)
        self.core = Core(work, args.bitcoind)
        self.fs = os.path.join(work, "index-fs")
        self.db = os.path.join(self.fs, "db")
        self.mounted = False
        self.soaked = Osprey(self.osprey_bin, work, self.core, self.db, "osprey")
        self.blk_trigger = os.path.join(work, "blk-eio-on")
        self.db_trigger = os.path.join(work, "db-eio-on")
        self.shim = os.path.join(work, "libeio_shim.so")
        self.fresh_runs = 0
        self.stats = {k: dict(injected=0, effect=0, recovered=0, digests=0, answers=0, lost=0)
                      for k in KINDS}
        self.failures = []
        self.outage_lines_before = 0

    # -- setup --------------------------------------------------------

    def setup(self):
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", self.shim,
                        os.path.join(ROOT, "tests/it/eio_shim.c"), "-ldl"], check=True)
        chain = os.path.join(self.work, "chain")
        log(f"chaingen tiny, {self.args.blocks} blocks, seed {self.args.seed}")
        self.run_osprey(["chaingen", "--preset", "tiny", "--seed", str(self.args.seed % 1000),
                         "--blocks", str(self.args.blocks), "--out", chain], 600)
        with open(os.path.join(chain, "manifest.json")) as f:
            self.manifest_path = f.name
            self.manifest = json.load(f)
        self.core.start()
        self.run_osprey(["chaingen", "submit", "--dir", chain, "--daemon-rpc-addr",
                         f"127.0.0.1:{self.core.rpc_port}", "--auth", f"{RPC_USER}:{RPC_PASS}"], 600)
        # Past initial block download (the chain's blocks are old), and a
        # clean restart so that the chain is on disk for good: a SIGKILL
        # later loses at most what was mined since.
        self.core.mine(1)
        self.core.stop()
        self.core.outages = 0
        self.core.start()
        self.base_height = self.core.tip()[0]
        # The index on a tmpfs of its own, to be filled: room for the index
        # of the chain and of an hour's mined blocks, several times over.
        probe_db = os.path.join(self.work, "probe-db")
        self.digest(probe_db)
        size = max(64 << 20, 4 * dir_bytes(probe_db) + (32 << 20))
        shutil.rmtree(probe_db)
        os.makedirs(self.fs)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", self.fs], check=True)
        self.mounted = True
        log(f"index tmpfs of {size >> 20} MiB on {self.fs}; Core at height {self.base_height}")
        self.start_soaked()
        self.wait_recovered("first sync")

    def run_osprey(self, args, timeout, env=None):
        done = subprocess.run([self.osprey_bin, *args], capture_output=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        if done.returncode != 0:
            raise Failure(f"osprey {' '.join(args[:2])} exited {done.returncode}: "
                          f"{done.stderr.decode(errors='replace')[-2000:]}")
        return done.stdout.decode()

    def digest(self, db):
        out = self.run_osprey(["index", "--network", "regtest", "--db-dir", db, "--daemon-dir",
                               self.core.datadir, "--daemon-rpc-addr", f"127.0.0.1:{self.core.rpc_port}",
                               "--skip-default-conf-files", "--log-filter", "warn", "--digest"], 600)
        line = json.loads(out.strip().splitlines()[-1])
        return line["height"], line["hash"], line["digest"]

    def blk_env(self):
        """Osprey's usual environment: the shim loaded, failing reads of
        Core's block files while the trigger exists."""
        return {"LD_PRELOAD": self.shim, "EIO_SHIM_DIR": self.core.blocks_dir + "/",
                "EIO_SHIM_TRIGGER": self.blk_trigger, "EIO_SHIM_OPS": "r", "EIO_SHIM_ONE_IN": "1"}

    def start_soaked(self, env=None):
        # Any block source, as users pick them; REST only while Core has it.
        sources = ["auto", "rpc"] + (["rest"] if self.core_rest else [])
        self.soaked.start(env or self.blk_env(), source=self.rng.choice(sources))

    core_rest = True

    # -- checks -------------------------------------------------------

    def wait_recovered(self, what):
        height, block_hash = self.core.tip()
        wait_for(f"{what}: osprey serves Core's tip {height}", self.args.recover_secs,
                 lambda: self.soaked.serves(height, block_hash), interval=0.5)

    def answers(self, server, out):
        subprocess.run([sys.executable, os.path.join(HERE, "electrum_answers.py"), "--port",
                        str(server.port), "--manifest", self.manifest_path, "--out", out, "--wait", "120"],
                       check=True, capture_output=True, timeout=600)
        with open(out, "rb") as f:
            lines = f.read().splitlines()
        wanted = {a["scripthash"]: [{"tx_hash": t, "height": h} for t, h in a["history"]]
                  for a in self.manifest["wallet"]["addresses"]}
        checked = 0
        for line in lines:
            request, answer = line.split(b"\t", 1)
            request, answer = json.loads(request), json.loads(answer)
            if request["method"] == "blockchain.scripthash.get_history":
                if answer.get("result") != wanted[request["params"][0]]:
                    raise Failure(f"{server.name}: history of {request['params'][0]} is {answer}, "
                                  f"the manifest says {wanted[request['params'][0]]}")
                checked += 1
        return len(lines)

    def check(self, kind):
        """After a fault: recovered by itself, answers right, a clean stop,
        the digest a fresh build's, the fresh build's answers the same."""
        stats = self.stats[kind]
        self.wait_recovered(kind)
        stats["recovered"] += 1
        soaked_answers = os.path.join(self.work, "answers-soaked")
        stats["answers"] += self.answers(self.soaked, soaked_answers)
        status = self.soaked.terminate()
        if status != 0:
            raise Failure(f"osprey exited with {status} on SIGTERM:\n{self.soaked.log_tail()}")
        ours = self.digest(self.db)
        self.fresh_runs += 1
        fresh_db = os.path.join(self.work, f"fresh-{self.fresh_runs}")
        theirs = self.digest(fresh_db)
        stats["digests"] += 1
        if ours != theirs:
            raise Failure(f"digest {ours} of the soaked index, {theirs} of a fresh build")
        fresh = Osprey(self.osprey_bin, self.work, self.core, fresh_db, "fresh")
        fresh.start()
        try:
            height, block_hash = self.core.tip()
            wait_for("the fresh build serves", self.args.recover_secs,
                     lambda: fresh.serves(height, block_hash), interval=0.5)
            fresh_answers = os.path.join(self.work, "answers-fresh")
            stats["answers"] += self.answers(fresh, fresh_answers)
        finally:
            fresh.terminate()
            shutil.rmtree(fresh_db, ignore_errors=True)
        with open(soaked_answers, "rb") as a, open(fresh_answers, "rb") as b:
            if a.read() != b.read():
                raise Failure("the soaked server's answers differ from the fresh build's "
                              f"(kept in {soaked_answers} and {fresh_answers})")
        self.start_soaked()
        self.wait_recovered(f"{kind}: restarted after the check")

    # -- faults -------------------------------------------------------

    def mine_some(self, low=1, high=12):
        return self.core.mine(self.rng.randint(low, high))

    def pause(self, low, high):
        time.sleep(self.rng.uniform(low, high))

    def wipe_index(self):
        """Osprey stopped, its index deleted, and started again: a first
        sync begins."""
        self.soaked.terminate()
        for name in os.listdir(self.db) if os.path.isdir(self.db) else []:
            path = os.path.join(self.db, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        self.start_soaked()

    def fault_osprey_kill9(self):
        if self.rng.random() < 1 / 3:
            # During a first sync: the index started over.
            self.wipe_index()
            self.pause(0.2, 3.0)
        else:
            self.mine_some(5, 40)
            self.pause(0.0, 1.5)
        self.soaked.kill9()
        self.start_soaked()

    def fault_core_kill9(self):
        if self.rng.random() < 1 / 3:
            # During osprey's first sync: the index started over.
            self.wipe_index()
            self.pause(0.2, 2.0)
        else:
            self.mine_some()
            self.pause(0.0, 1.0)
        self.core.kill9()
        self.pause(0.0, 5.0)
        self.core.start(rest=self.core_rest)
        self.mine_some(1, 3)

    def fault_core_restart(self):
        self.mine_some()
        self.pause(0.0, 1.0)
        self.core.stop()
        self.pause(0.0, 5.0)
        self.core.start(rest=self.core_rest)
        self.mine_some(1, 3)

    def fault_core_upgrade(self):
        self.mine_some()
        self.core.stop()
        self.core.start(rest=self.core_rest, upgraded=self.core.current == "original")
        self.mine_some(1, 3)

    def use_source(self, source):
        """Osprey restarted on `source`, unless it is on it already."""
        if self.soaked.source != source:
            self.soaked.terminate()
            self.soaked.start(self.blk_env(), source=source)
            self.wait_recovered(f"restarted on {source}")

    def fault_rest_off(self):
        # On REST: the source that stops giving blocks.
        self.use_source("rest")
        self.core.stop()
        self.core_rest = False
        self.core.start(rest=False)
        self.mine_some(3, 20)
        self.wait_recovered("rest-off: without REST")
        self.core.stop()
        self.core_rest = True
        self.core.start(rest=True)
        self.mine_some(1, 3)

    def fault_blk_unreadable(self):
        # On Core's files (`auto` picks them).
        self.use_source("auto")
        open(self.blk_trigger, "w").close()
        try:
            self.mine_some(3, 20)
            self.wait_recovered("blk-unreadable: while the files fail")
            self.pause(0.0, 3.0)
        finally:
            os.remove(self.blk_trigger)
        self.mine_some(1, 3)

    def fault_reorg(self):
        height, _ = self.core.tip()
        if height - self.base_height < 3:
            self.core.mine(3)
            height += 3
        depth = self.rng.randint(1, 3)
        self.core.call("invalidateblock", self.core.call("getblockhash", height - depth + 1))
        self.core.mine(depth + self.rng.randint(1, 2), MINE_ELSEWHERE)

    def fault_disk_full(self):
        filler = os.path.join(self.fs, "filler")
        with open(filler, "wb") as f:
            chunk = bytes(1 << 20)
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        try:
            before = self.soaked.log_text().count("disk full: the index")
            deadline = time.monotonic() + 60
            # Blocks until osprey's next write fails.
            while self.soaked.log_text().count("disk full: the index") == before:
                if time.monotonic() > deadline:
                    raise Failure("disk-full: osprey never met the full disk")
                self.mine_some(1, 5)
                time.sleep(1)
            self.pause(0.0, 3.0)
        finally:
            os.remove(filler)

    def fault_eio(self):
        ops = self.rng.choice(["r", "w"])
        one_in = self.rng.randint(2, 40)
        self.soaked.terminate()
        open(self.db_trigger, "w").close()
        env = {"LD_PRELOAD": self.shim, "EIO_SHIM_DIR": self.db + "/", "EIO_SHIM_TRIGGER": self.db_trigger,
               "EIO_SHIM_OPS": ops, "EIO_SHIM_ONE_IN": str(one_in),
               "EIO_SHIM_SEED": str(self.rng.randint(0, 1000))}
        self.soaked.start(env)
        try:
            self.mine_some(1, 5)
            wanted = {a["scripthash"]: [{"tx_hash": t, "height": h} for t, h in a["history"]]
                      for a in self.manifest["wallet"]["addresses"]}
            deadline = time.monotonic() + self.rng.uniform(3, 15)
            while time.monotonic() < deadline and self.soaked.running():
                try:
                    answers = self.soaked.ask([("blockchain.scripthash.get_history", [s]) for s in wanted])
                except (OSError, ValueError):
                    time.sleep(0.2)
                    continue
                for scripthash, answer in zip(wanted, answers):
                    if "result" in answer and answer["result"] != wanted[scripthash]:
                        raise Failure(f"eio: a wrong answer for {scripthash}: {answer}")
                self.stats["eio"]["answers"] += len(answers)
        finally:
            os.remove(self.db_trigger)
        if self.soaked.running():
            self.soaked.terminate()
        self.start_soaked()

    def fault_hostile(self):
        phase = self.rng.choice(["amplification", "vanish", "pipeline"])
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "hostile.py"), "--server", f"127.0.0.1:{self.soaked.port}",
             "--pid", str(self.soaked.process.pid), "--manifest", self.manifest_path, "--phases", phase,
             "--phase-secs", "5", "--rest-secs", "2", "--baseline-secs", "1", "--drain-secs", "2",
             "--amp-sessions", "10", "--amp-secs", "5", "--vanish-sessions", "20", "--vanish-scripts", "50",
             "--pipeline-requests", "2000", "--pipeline-secs", "60", "--discover-txs", "200"],
            capture_output=True, timeout=600)
        if done.returncode != 0:
            raise Failure(f"hostile.py {phase} exited {done.returncode}: "
                          f"{done.stderr.decode(errors='replace')[-2000:]}")

    # -- the run ------------------------------------------------------

    def run(self):
        self.setup()
        end = time.monotonic() + self.args.minutes * 60
        kinds = []
        while time.monotonic() < end:
            if not kinds:
                kinds = list(KINDS)
                self.rng.shuffle(kinds)
            kind = kinds.pop()
            self.stats[kind]["injected"] += 1
            started = time.monotonic()
            marker = EVIDENCE.get(kind)
            before = self.soaked.log_text().count(marker) if marker else 0
            try:
                getattr(self, "fault_" + kind.replace("-", "_"))()
                self.wait_recovered(kind)
                # Counted once osprey caught up: a reorg is seen when it
                # follows it, not when it is mined.
                if not marker or self.soaked.log_text().count(marker) > before:
                    self.stats[kind]["effect"] += 1
                self.check(kind)
                log(f"{kind}: recovered and checked in {time.monotonic() - started:.0f} s")
            except (Failure, subprocess.SubprocessError, OSError) as e:
                self.stats[kind]["lost"] += 1
                self.failures.append(f"{kind}: {e}")
                log(f"{kind}: FAILED: {e}\n--- osprey log tail:\n{self.soaked.log_tail()}")
                self.restore()

    def restore(self):
        """After a failure: Core and osprey up again, for the next fault."""
        for trigger in (self.blk_trigger, self.db_trigger, os.path.join(self.fs, "filler")):
            if os.path.exists(trigger):
                os.remove(trigger)
        if self.core.process.poll() is not None:
            self.core.start(rest=self.core_rest)
        if self.soaked.running():
            self.soaked.terminate()
        self.start_soaked()

    def table(self):
        rows = ["| fault | injected | took effect | recovered | digest checks | answers checked | lost |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        total = dict(injected=0, effect=0, recovered=0, digests=0, answers=0, lost=0)
        for kind in KINDS:
            s = self.stats[kind]
            rows.append(f"| {kind} | {s['injected']} | {s['effect']} | {s['recovered']} | {s['digests']} | "
                        f"{s['answers']} | {s['lost']} |")
            for key in total:
                total[key] += s[key]
        rows.append(f"| **total** | {total['injected']} | {total['effect']} | {total['recovered']} | "
                    f"{total['digests']} | {total['answers']} | {total['lost']} |")
        lines = self.soaked.log_text().count("is not answering")
        rows.append("")
        rows.append(f"Core outages (kills, stops, restarts): {self.core.outages}; osprey's "
                    f"\"node ... is not answering\" lines: {lines} (at most one per outage)")
        if lines > self.core.outages:
            self.failures.append(f"{lines} outage lines for {self.core.outages} outages")
        return "\n".join(rows), total["lost"] + (lines > self.core.outages)

    def close(self):
        for server in (self.soaked,):
            if server.running():
                server.kill9()
        self.core.close()
        if self.mounted:
            subprocess.run(["umount", "-l", self.fs], check=False)


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def find_bitcoind():
    for candidate in (os.environ.get("BITCOIND_EXE"), os.path.join(ROOT, "../shared/peers/bin/bitcoind"),
                      shutil.which("bitcoind")):
        if candidate and os.path.isfile(candidate):
            return os.path.abspath(candidate)
    sys.exit("soak: no bitcoind (set BITCOIND_EXE)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--osprey", default=os.path.join(ROOT, "target/release/osprey"))
    parser.add_argument("--bitcoind", default=None)
    parser.add_argument("--blocks", type=int, default=600, help="the chaingen chain's height")
    parser.add_argument("--recover-secs", type=float, default=180)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    args.bitcoind = args.bitcoind or find_bitcoind()
    work = tempfile.mkdtemp(prefix="osprey-soak-")
    log(f"seed {args.seed}, {args.minutes} min, work directory {work}")
    soak = Soak(args, work)
    started = time.monotonic()
    try:
        soak.run()
    finally:
        soak.close()
    table, lost = soak.table()
    print(f"soak: seed {args.seed}, {(time.monotonic() - started) / 60:.1f} min\n")
    print(table)
    for failure in soak.failures:
        print(f"- {failure}")
    if lost or args.keep:
        log(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if lost else 0)


if __name__ == "__main__":
    main()
