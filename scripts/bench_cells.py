#!/usr/bin/env python3
"""make bench-cells: what a cell written to HBase costs, against the cells per row.

Writes ROWS (default 40 000) session-like rows of 2, 4, 8, 16 and 32 cells each into a fresh
table per run, the way the job writes session rows (happybase batches of 5 000 cells through
the Thrift server), and prints the wall time and the CPU of HBase, its Thrift server and
this writer, per row and per cell. A first round warms HBase and the Thrift server up (their
JIT: it costs several times the later rounds) and is not counted; then two rounds in
opposite orders. Then what a session row read costs: a row that exists against one that does
not. Figures, not assertions.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from leakproof.core import config
from leakproof.hbase.connection import connect, families
from leakproof.hbase.wire.gets import get_rows
from proctools import CpuByRole

ROOT = Path(__file__).resolve().parent.parent
ROWS = int(os.environ.get("ROWS", "40000"))
WIDTHS = [int(w) for w in os.environ.get("CELLS", "2,4,8,16,32").split(",")]
WRITE_CELLS = 5000  # hbase.session_store's cells per mutateRows
READ_ROWS = 1000  # hbase.session_store's rows per getRows
READ_WIDTH = 16  # about a new session row's cells


def timed(work: Callable[[], object]) -> tuple[float, dict[str, float]]:
    """Wall time of ``work`` and the CPU each process spent meanwhile."""
    cpu = CpuByRole()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            cpu.sample()

    sampler = threading.Thread(target=sample, daemon=True)
    cpu.start()
    sampler.start()
    t0 = time.monotonic()
    work()
    wall = time.monotonic() - t0
    done.set()
    sampler.join()
    return wall, cpu.stop()


def rows_of(cells: int) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """ROWS session-like rows of ``cells`` cells (the same ones for the same ``cells``)."""
    rng = random.Random(cells)
    return [(f"s-{rng.getrandbits(48):012x}".encode(),
             {f"s:c{i}".encode(): str(rng.randrange(10**6)).encode() for i in range(cells)})
            for _ in range(ROWS)]


def write(conn: object, table_name: str, cells: int) -> tuple[float, dict[str, float]]:
    table = conn.table(table_name)  # type: ignore[attr-defined]
    rows = rows_of(cells)

    def put_all() -> None:
        with table.batch(batch_size=WRITE_CELLS) as batch:
            for key, row in rows:
                batch.put(key, row)
    return timed(put_all)


def reads(conn: object, table_name: str) -> None:
    """What a session row read costs, a row that exists against one that does not (most
    touched sessions are new): ``READ_WIDTH`` cells a row, ``READ_ROWS`` rows a getRows,
    on a table of ROWS rows; twice, the first warms up."""
    write(conn, table_name, READ_WIDTH)
    table = conn.table(table_name)  # type: ignore[attr-defined]
    present = [key for key, _ in rows_of(READ_WIDTH)]
    rng = random.Random(-1)  # keys like them, among them, but never written
    absent = [f"s-{rng.getrandbits(48):012x}-".encode() for _ in range(ROWS)]
    print(f"\nreads: {ROWS} rows of {READ_WIDTH} cells, {READ_ROWS} rows per getRows; "
          "CPU in microseconds per row")

    def read_all(fetch: Callable[[list[bytes]], object], keys: list[bytes]) -> None:
        for i in range(0, len(keys), READ_ROWS):
            fetch(keys[i:i + READ_ROWS])

    # happybase's own, and what hbase.session_store reads with
    readers = (("happybase", table.rows), ("leakproof", partial(get_rows, table)))
    for round_ in range(2):
        for label, keys in (("present", present), ("absent", absent)):
            for reader, fetch in readers:
                wall, spent = timed(partial(read_all, fetch, keys))
                mark = "" if round_ else "warm-up "
                print(f"{mark}{label:>8} via {reader:9}: wall {wall * 1e6 / ROWS:6.1f}, hbase "
                      f"{spent.get('hbase', 0.0) * 1e6 / ROWS:6.1f}, thrift "
                      f"{spent.get('hbase thrift', 0.0) * 1e6 / ROWS:5.1f}, reader "
                      f"{spent.get('other', 0.0) * 1e6 / ROWS:5.1f}", flush=True)


def main() -> int:
    cfg = config.load(ROOT / "config.yml").hbase
    conn = connect(cfg)
    prefix = f"cells{int(time.time())}"
    print(f"{ROWS} rows per run, {WRITE_CELLS} cells per mutateRows; CPU in microseconds")
    print(f"{'cells/row':>9} {'wall s':>7} {'us/row':>7} {'us/cell':>8} "
          f"{'hbase':>6} {'thrift':>7} {'writer':>7}   (CPU us per cell)")
    results: dict[int, list[tuple[float, float, float, float]]] = {}
    try:
        for round_ in range(3):
            for cells in (list(reversed(WIDTHS)) if round_ == 2 else WIDTHS):
                name = f"{prefix}_{round_}_{cells}"
                conn.create_table(name, families("s"))  # as the sessions table is made
                wall, spent = write(conn, name, cells)
                n = ROWS * cells
                hbase = spent.get("hbase", 0.0) * 1e6 / n
                thrift = spent.get("hbase thrift", 0.0) * 1e6 / n
                writer = spent.get("other", 0.0) * 1e6 / n
                if round_:
                    results.setdefault(cells, []).append((wall, hbase, thrift, writer))
                mark = "" if round_ else "warm-up "
                print(f"{mark}{cells:9d} {wall:7.2f} {wall * 1e6 / ROWS:7.0f} "
                      f"{wall * 1e6 / n:8.2f} {hbase:6.2f} {thrift:7.2f} {writer:7.2f}", flush=True)
                conn.disable_table(name)
                conn.delete_table(name)
        name = f"{prefix}_reads"
        conn.create_table(name, families("s"))
        reads(conn, name)
        conn.disable_table(name)
        conn.delete_table(name)
    finally:
        conn.close()
    print("\nRESULT (mean of the two counted rounds; CPU: HBase + Thrift + writer)")
    for cells in WIDTHS:
        runs = results[cells]
        wall = sum(r[0] for r in runs) / len(runs)
        per_cell = sum(r[1] + r[2] + r[3] for r in runs) / len(runs)
        print(f"  {cells:3d} cells/row: {wall * 1e6 / ROWS:6.0f} us per row wall, "
              f"{per_cell:5.2f} CPU us per cell, {per_cell * cells:6.1f} CPU us per row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
