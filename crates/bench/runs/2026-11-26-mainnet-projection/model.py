#!/usr/bin/env python3
"""Projects Osprey's index to mainnet from the points measured on
chaingen's mainnet-profile chains; README.md beside this file says where
each figure comes from. `python3 model.py` prints the projection as the
README's table rows.

The model, and why it has this shape:

- Disk grows linearly with transactions. The chains have mainnet's
  inputs, outputs and address reuse per transaction (crates/chaingen/src/
  mainnet.rs), so rows per transaction are mainnet's, and the flat files
  are exactly 35 bytes a transaction. The slope between the 10M and 50M
  points is the marginal cost: the 50M chain spans three history epochs
  (2^24 transactions each), so the per-epoch values are in it, and the
  undo data (the last blocks only) is in the constant. electrs is
  projected the same way and set against its published size: that ratio
  says how far the chain's shape is from mainnet's, and gives the lower
  end of the range.
- The first sync on mainnet is two phases (correction of stop 25). A
  bulk load keeps the history and txid rows in level 0 until one column
  family holds 200 files (`bulk_l0_files_max`); the 50M chain made 183,
  so its build was bulk from end to end, but mainnet reaches 200 at
  ~55M transactions, and `osprey serve` indexes the other ~95% under
  RocksDB's leveled compaction. Its cost comes from a quiet pair of 50M
  builds from the blk files: the default (bulk throughout) against a
  build handing over at 9 files, ~5% of the chain, as mainnet does at
  200. Handed over, the sync took 1.39x as long, wrote 6.21 bytes per
  byte of index instead of 1.77, and slowed as the database grew (tenths
  0.56-0.76 of the first): mainnet's index has one level more than the
  50M one, each adding rewrites, so the time rows are a lower bound.
- Peak disk during `osprey serve`'s first sync: leveled compaction keeps
  the database near its final size; the pair peaked at 1.115x it while
  syncing (both builds). `osprey index`, which ends with a full
  compaction (for building an index elsewhere), peaks at 1.56x (the
  handed-over build) to 1.69x (bulk throughout).
- First sync on this machine: the 50M build from Bitcoin Core's rate
  (flat over its tenths: bulk), for the bulk phase, and that rate slowed
  by the pair's ratio for the rest; no final compaction.
- A 4-core ARM board: the sync's CPU seconds per transaction measured
  here (the Core build's, slowed by the pair's ratio past the hand-over),
  times the board's per-core slowdown against this VM (one
  benchmark, sysbench's CPU test, run here and published for the boards),
  over the cores Osprey keeps busy while syncing (the same share of 4
  cores as of 2 here); the USB SSD bounds that from below (block
  and undo files read once, the measured bytes written per byte of index
  written). sysbench's test
  is arithmetic only; RocksDB's compaction and the block parsing also wait
  on memory, slower on these boards, so read the board rows as the
  optimistic end.
- Memory: peak anonymous RSS (the heap; file-backed pages are page cache
  the kernel can drop) of the largest bulk build, scaled by the pair's
  ratio of peak RSS (leveled compaction holds more), plus the header
  chain kept in memory, which grows with blocks. RocksDB's table cache
  is at its cap (max_open_files 256) well before 50M, so nothing else
  grows.
"""

GB = 1e9
MIB = 2**20

# --- measured on this VM (README.md: commands and runs) ---------------------
TXS_10M = 10_000_857
TXS_50M = 50_003_058
# Osprey format 4 and electrs 0.12 from Bitcoin Core (peerlab), `du -sb`.
OSPREY = {TXS_10M: 974_862_684, TXS_50M: 4_797_658_148}
ELECTRS = {TXS_10M: 500_764_717, TXS_50M: 2_495_445_395}
# The 50M build from Bitcoin Core, Osprey alone on the machine.
SYNC_S_50M = 279.0
WALL_S_50M = 352.0
CPU_S_50M = 581.0
BLOCKS_50M = 45_921
# The 50M build from the blk files (shared machine): peak anonymous RSS,
# MiB.
ANON_RSS_MIB_50M = 695.2
INDEX_50M = 4_797_773_508
# The quiet pair (2026-11-26 11:04-11:30 UTC, nothing else running):
# `osprey bench index --chain mn50m --runs 1`, the default build against
# one handing over to leveled compaction at 9 level-0 files. `du -sb`
# every 5 s; sync seconds, CPU, bytes written and VmHWM from the bench.
BULK = dict(sync_s=567.6, cpu_s=1161.6, written_per_index_byte=1.77,
            peak_while_syncing=5_362_945_963, peak=8_045_827_487,
            rss=758_386_688)
HANDED_OVER = dict(sync_s=787.2, cpu_s=1607.2, written_per_index_byte=6.21,
                   peak_while_syncing=5_351_570_692, peak=7_481_554_613,
                   rss=938_848_256)
# Level-0 files of the history column family at the end of the 50M bulk
# build (RocksDB's LOG), and the cap at which a bulk load hands over.
L0_FILES_50M = 183
BULK_L0_FILES_MAX = 200
# sysbench 1.0.20 `sysbench cpu --threads=1 --time=20 run` here, events
# per second, median of 3 with every other job on the machine stopped.
SYSBENCH_HERE = 4414.00

# --- published -------------------------------------------------------------
# leoncode.co.uk, "Raspberry Pi CPU Benchmarks": sysbench 1.0.20,
# `sysbench cpu --threads=1 --time=60 run`, one core.
SYSBENCH_BOARDS = {"Raspberry Pi 5 (Cortex-A76)": 2737.49,
                   "Raspberry Pi 4 (Cortex-A72)": 1477.83}
ELECTRS_MAINNET_GB = 56.0    # issue 22's figure for electrs on mainnet
# A SATA SSD behind a USB 3 bridge: what the boards' USB 3 ports carry.
USB_READ_MB_S = 350.0
USB_WRITE_MB_S = 300.0

# --- mainnet ---------------------------------------------------------------
MAINNET_TXS = 1.2e9          # issue 22's figure
MAINNET_BLOCKS = 975_000     # late 2026: 840,000 in April 2024, 144 a day since
MAINNET_BLOCK_FILES = 800e9  # blk and rev files the first sync reads (issue 22)
HEADER_BYTES_IN_MEMORY = 120  # README, "Memory"


def slope(points):
    (n0, b0), (n1, b1) = sorted(points.items())
    return (b1 - b0) / (n1 - n0)


def project():
    osprey_slope, electrs_slope = slope(OSPREY), slope(ELECTRS)
    shape = electrs_slope * MAINNET_TXS / (ELECTRS_MAINNET_GB * GB)
    high = osprey_slope * MAINNET_TXS
    low = high / shape
    rows = [
        ("bytes per transaction, 10M to 50M",
         f"Osprey {osprey_slope:.1f}, electrs {electrs_slope:.1f}"),
        ("electrs projected the same way",
         f"{electrs_slope * MAINNET_TXS / GB:.0f} GB, {shape:.2f}x its published "
         f"{ELECTRS_MAINNET_GB:.0f} GB"),
        ("index on disk", f"{low / GB:.0f}-{high / GB:.0f} GB"),
    ]

    # Past the hand-over, leveled compaction: the pair's ratios.
    handover_txs = TXS_50M * BULK_L0_FILES_MAX / L0_FILES_50M
    bulk_share = handover_txs / MAINNET_TXS
    slower = HANDED_OVER["sync_s"] / BULK["sync_s"]
    cpu_more = HANDED_OVER["cpu_s"] / BULK["cpu_s"]
    peak_serve = max(BULK["peak_while_syncing"], HANDED_OVER["peak_while_syncing"]) / INDEX_50M
    peak_index = HANDED_OVER["peak"] / INDEX_50M
    rows.append(("bulk load hands over to leveled compaction at",
                 f"~{handover_txs / 1e6:.0f}M transactions ({bulk_share:.1%} of mainnet); "
                 f"past it the 50M pair synced {slower:.2f}x slower, {cpu_more:.2f}x the CPU, "
                 f"{HANDED_OVER['written_per_index_byte']:.2f} bytes written per index byte"))
    rows.append(("peak on disk during the first sync (`osprey serve`)",
                 f"{low * peak_serve / GB:.0f}-{high * peak_serve / GB:.0f} GB "
                 f"({peak_serve:.3f}x; `osprey index`, which ends with a full compaction: "
                 f"{low * peak_index / GB:.0f}-{high * peak_index / GB:.0f} GB)"))

    def phases(seconds_per_tx):
        return MAINNET_TXS * seconds_per_tx * (bulk_share + (1 - bulk_share) * slower)

    sync_rate = TXS_50M / SYNC_S_50M
    here = phases(1 / sync_rate)
    rows.append(("first sync, this VM (2 cores), at least",
                 f"{here / 3600:.1f} h ({sync_rate / 1e3:.0f}k tx/s while bulk, "
                 f"{sync_rate / slower / 1e3:.0f}k after)"))

    # The Core build's sync CPU (its wall minus its final compaction's).
    compaction_s = WALL_S_50M - SYNC_S_50M
    sync_cpu_per_tx = (CPU_S_50M - compaction_s) / TXS_50M
    cores_busy = 2 * (CPU_S_50M - compaction_s) / SYNC_S_50M
    disk = (MAINNET_BLOCK_FILES / (USB_READ_MB_S * 1e6)
            + high * HANDED_OVER["written_per_index_byte"] / (USB_WRITE_MB_S * 1e6))
    for board, score in SYSBENCH_BOARDS.items():
        slowdown = SYSBENCH_HERE / score
        sync = phases(sync_cpu_per_tx * slowdown / cores_busy)
        rows.append((f"first sync, {board}, 4 cores, USB 3 SSD, at least",
                     f"{max(sync, disk) / 3600:.1f} h (a core {slowdown:.2f}x "
                     f"slower than here; the SSD alone needs {disk / 3600:.1f} h)"))

    headers = (MAINNET_BLOCKS - BLOCKS_50M) * HEADER_BYTES_IN_MEMORY / MIB
    heap = ANON_RSS_MIB_50M * HANDED_OVER["rss"] / BULK["rss"]
    rows.append(("peak memory (anonymous RSS)",
                 f"{heap + headers:.0f} MiB ({heap:.0f} at 50M handed over, "
                 f"+{headers:.0f} of headers)"))
    return rows


if __name__ == "__main__":
    for name, value in project():
        print(f"| {name} | {value} |")
