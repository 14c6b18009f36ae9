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
- Peak disk while building is the peak/final ratio of the 50M build
  (RocksDB's bulk load leaves its merge operands unmerged until the final
  compaction) applied to the projected index.
- First sync on this machine: the 50M build from Bitcoin Core, which was
  flat over its tenths, at its sync rate for the chain, plus its final
  compaction at its bytes per second for the index.
- A 4-core ARM board: the sync's CPU seconds per transaction measured
  here, times the board's per-core slowdown against this VM (one
  benchmark, sysbench's CPU test, run here and published for the boards),
  over the cores Osprey keeps busy while syncing (the same share of 4
  cores as of 2 here); the USB SSD bounds that phase from below (block
  and undo files read once, the measured bytes written per byte of index
  written once). Then the final compaction, this VM's time for it times
  the slowdown, as one core's work. sysbench's test
  is arithmetic only; RocksDB's compaction and the block parsing also wait
  on memory, slower on these boards, so read the board rows as the
  optimistic end.
- Memory: peak anonymous RSS (the heap; file-backed pages are page cache
  the kernel can drop) of the largest build, plus the header chain kept
  in memory, which grows with blocks. RocksDB's table cache is at its
  cap (max_open_files 256) well before 50M, so nothing else grows.
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
WRITTEN_PER_INDEX_BYTE = 1.77
BLOCKS_50M = 45_921
# The 50M build from the blk files: the database's peak size while
# building over its final size (`du -sb` every 5 s).
PEAK_OVER_FINAL = 8_097_243_612 / 4_797_773_508
# Peak anonymous RSS of that build, MiB.
ANON_RSS_MIB_50M = 695.2
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
        ("peak on disk during the first sync",
         f"{low * PEAK_OVER_FINAL / GB:.0f}-{high * PEAK_OVER_FINAL / GB:.0f} GB"),
    ]

    sync_rate = TXS_50M / SYNC_S_50M
    compaction_rate = OSPREY[TXS_50M] / (WALL_S_50M - SYNC_S_50M)
    here = MAINNET_TXS / sync_rate + high / compaction_rate
    rows.append(("first sync, this VM (2 cores)",
                 f"{here / 3600:.1f} h ({sync_rate / 1e3:.0f}k tx/s, then "
                 f"{high / compaction_rate / 3600:.1f} h of final compaction)"))

    # The sync spreads over the cores; the final compaction is taken as
    # one core's work that more cores do not shorten.
    compaction_s = WALL_S_50M - SYNC_S_50M
    sync_cpu_per_tx = (CPU_S_50M - compaction_s) / TXS_50M
    cores_busy = 2 * (CPU_S_50M - compaction_s) / SYNC_S_50M
    disk = (MAINNET_BLOCK_FILES / (USB_READ_MB_S * 1e6)
            + high * WRITTEN_PER_INDEX_BYTE / (USB_WRITE_MB_S * 1e6))
    for board, score in SYSBENCH_BOARDS.items():
        slowdown = SYSBENCH_HERE / score
        sync = MAINNET_TXS * sync_cpu_per_tx * slowdown / cores_busy
        compaction = high / compaction_rate * slowdown
        rows.append((f"first sync, {board}, 4 cores, USB 3 SSD",
                     f"{(max(sync, disk) + compaction) / 3600:.1f} h (a core {slowdown:.2f}x "
                     f"slower than here; the SSD alone needs {disk / 3600:.1f} h)"))

    headers = (MAINNET_BLOCKS - BLOCKS_50M) * HEADER_BYTES_IN_MEMORY / MIB
    rows.append(("peak memory (anonymous RSS)",
                 f"{ANON_RSS_MIB_50M + headers:.0f} MiB ({ANON_RSS_MIB_50M:.0f} at 50M, "
                 f"+{headers:.0f} of headers)"))
    return rows


if __name__ == "__main__":
    for name, value in project():
        print(f"| {name} | {value} |")
