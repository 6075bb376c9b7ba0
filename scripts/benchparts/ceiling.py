"""The raw ceiling: kafka-python read + decode of the topic's ranges with the job's
parallelism (WORKERS spawned processes), no Spark, no HBase."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchparts.cpu import PeakSampler, machine_cpu_s
from benchparts.settings import WORKERS
from leakproof.core import config
from leakproof.core.errors import DecodeError
from leakproof.core.offsets import OffsetRange
from leakproof.kafka.reader import read_range
from leakproof.kafka.registry import decoder_for


def read_ranges(cfg_path: str, ranges: list[OffsetRange]) -> int:
    cfg = config.load(cfg_path)
    n = 0
    decoder = decoder_for(cfg.model, cfg.input)
    for rng in ranges:
        for offset, key, value, timestamp, headers in read_range(cfg.kafka, rng):
            with contextlib.suppress(DecodeError):  # the job dead-letters; same cost here
                decoder.decode(key, value, topic=rng.topic, partition=rng.partition,
                               offset=offset, timestamp=timestamp, headers=headers)
            n += 1
    return n


@dataclass(frozen=True)
class Ceiling:
    """The ceiling's figures: events/s, machine CPU s per M events, peak RSS of the tree."""

    rate: float
    cpu_per_m: float
    peak_mib: float


def measure_ceiling(cfg_path: Path, ranges: list[OffsetRange]) -> Ceiling:
    """Read and decode ``ranges`` in WORKERS spawned processes, say what it took."""
    print(f"== ceiling: read + decode, {WORKERS} processes, no Spark, no HBase", flush=True)
    shares = [ranges[i::WORKERS] for i in range(WORKERS)]
    sampler = PeakSampler(os.getpid())
    t0, cpu0 = time.monotonic(), machine_cpu_s()
    with mp.get_context("spawn").Pool(WORKERS) as pool:
        counts = pool.starmap(read_ranges, [(str(cfg_path), s) for s in shares])
    ceiling_s = time.monotonic() - t0
    ceiling_cpu = (machine_cpu_s() - cpu0) / sum(counts) * 1e6
    ceiling_peak = sampler.stop()
    ceiling_rate = sum(counts) / ceiling_s
    print(f"   {sum(counts)} records in {ceiling_s:.1f}s: {ceiling_rate:.0f} ev/s, "
          f"peak RSS {ceiling_peak:.0f} MiB, machine CPU {ceiling_cpu:.1f} s per M events",
          flush=True)
    return Ceiling(ceiling_rate, ceiling_cpu, ceiling_peak)
