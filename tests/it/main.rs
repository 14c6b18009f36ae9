//! The `osprey` binary's functional suite: the real binary, run as a child
//! process, against a real btcd or Bitcoin Core regtest node, queried over
//! TCP by a real Electrum client library (`electrum-client`) and by raw
//! JSON-RPC lines.
//! Every expected answer is computed by the test from what the node reports,
//! never hard-coded.
//!
//! | module        | proves |
//! |---------------|--------|
//! | `protocol`    | every Electrum method answers like the node, at 1.4, 1.6 and 1.7, notifications included |
//! | `mempool`     | mempool answers follow the node: parents mined alone, replacements, surprise blocks |
//! | `outpoint`    | 1.7 outpoint statuses and notifications follow the node (btcd); exact spenders |
//! | `v1_7`        | a 1.7 client, matching notifications as the Electrum client does, is served on Bitcoin Core: every 1.7 method, notification and error |
//! | `bad_input`   | malformed or oversized input and exhausted limits give clear errors; the server lives on |
//! | `reorg`       | after a reorg, answers equal the node's view and a fresh index's |
//! | `replicas`    | read-only replicas on a writer's index answer what it answers through blocks and a reorg (btcd and Bitcoin Core); a replica's subscriber hears of a block within 1 s of the writer's; a late one catches up, a killed one takes nothing else down; none writes in the index's directory |
//! | `restart`     | a SIGTERM + restart on the same index equals a fresh index |
//! | `snapshot`    | an exported and imported index equals the original; bad snapshots are refused |
//! | `kill9`       | SIGKILL during the initial sync never corrupts the index |
//! | `io_errors`   | reads and writes failing with EIO (an LD_PRELOAD shim): a clear error and no panic on a failed write, an error and never a wrong answer on a failed read, a restart's digest equal to a fresh index's |
//! | `disk_full`   | a disk that fills during the first sync, at the tip or during a snapshot import: one clear line, answers from the committed index, resumed by itself once there is room, digest equal to a fresh index's (as root: it mounts a tmpfs) |
//! | `node_faults` | Bitcoin Core stopped, killed, "upgraded" (another binary path), its REST off and its files unreadable, during the first sync and at the tip: waited for, said once per outage, followed; answers the node's, digests a fresh build's |
//! | `core`        | on Bitcoin Core: files, REST and JSON-RPC give one index; kills, a reorg, a restart |
//! | `dropin`      | each node distribution's launch of electrs, the program renamed `osprey`, serves the node's tip |
//! | `bench_e2e`   | `osprey chaingen`, `chaingen submit` and `bench` work end to end |
//! | `packaging`   | the systemd unit passes `systemd-analyze verify`; its limits fit the defaults |
//! | `proxy`       | behind a real HAProxy (`send-proxy`, `send-proxy-v2`; TCP, TLS, WebSocket) the per-address cap and the logs see the client; IPv6 clients count by their /64; PROXY headers from anyone else close the connection |
//! | `haproxy`     | `contrib/haproxy.cfg` in a real HAProxy before a writer and two replicas: wallets spread over all three, each address to one server; their answers equal the writer's across a block and a reorg; a killed replica's wallets move to the others |
//! | `listeners`   | TLS (a kept self-signed certificate) and WebSocket listeners serve the node's chain |
//! | `monitoring`  | the startup lines, the sync summary and `/metrics` say what is true |
//! | `first_sync`  | the monitoring port answers electrs' paths and names before the node is reached |
//! | `startup`     | unworkable nodes refused in one line; another index format rebuilt, nothing else deleted |
//! | `demo`      | `osprey demo --silent-payments` pays the printed demo seed's wallet (derived here as Sparrow does) what its manifest lists, and serves it |
//! | `admin`       | `osprey admin` answers each command as the test's sessions and the node say; its socket is 0660, replaces a stale one, refuses bad requests clearly, goes with `stop` |
//! | `silent_payments` | a chaingen chain's silent payments reach each receiver's subscription, as its manifest lists them; on Bitcoin Core, spdk's payments reach their receivers from the mempool, once, and through a reorg, and nothing else does |
//!
//! btcd is found through `$OSPREY_BTCD`, the PATH or `~/go/bin/btcd`; a test
//! that cannot find it fails with the command that installs it. bitcoind is
//! found through `$BITCOIND_EXE`, the PATH or `../shared/peers/bin`; without
//! one the `core` tests skip loudly, except under CI, where they fail.
//! HAProxy (`proxy`) is found through `$OSPREY_HAPROXY`, the PATH or
//! `/usr/sbin/haproxy`; without it the test fails with how to install it.

// Tests report what they were doing (ports, seeds, the server's log) on
// stderr, which libtest captures and shows only for failing tests.
#![allow(clippy::print_stderr, clippy::print_stdout)]

mod common;

mod admin;
mod bad_input;
mod bench_e2e;
mod core;
mod demo;
mod disk_full;
mod dropin;
mod first_sync;
mod haproxy;
mod io_errors;
mod kill9;
mod listeners;
mod mempool;
mod monitoring;
mod node_faults;
mod outpoint;
mod packaging;
mod protocol;
mod proxy;
mod reorg;
mod replicas;
mod restart;
mod silent_payments;
mod snapshot;
mod startup;
mod v1_7;
