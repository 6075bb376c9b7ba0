"""``offsets:``: where committed offsets live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from leakproof.core.config.reader import Section

OffsetsStore = Literal["hbase", "kafka", "zookeeper"]


@dataclass(frozen=True)
class OffsetsConfig:
    """Where committed offsets live (the job's source of truth for where to resume).

    ``hbase``: the offsets table of docs/DESIGN.md, one row per batch (history, audit, rewind).
    ``kafka``: the consumer group ``kafka.group_id`` (Kafka's lag tools read it directly).
    ``zookeeper``: ``/consumers/<group>/offsets/<topic>/<partition>`` on ``zookeeper_hosts``.
    The driver lease stays in HBase whatever the store, so two drivers are still fenced.
    """

    store: OffsetsStore = "hbase"
    zookeeper_hosts: str = "127.0.0.1:2181"


def read_offsets(data: dict[str, Any]) -> OffsetsConfig:
    s = Section(data, "offsets", OffsetsConfig)
    return OffsetsConfig(store=s.choice("store", OffsetsStore),
                         zookeeper_hosts=s.text("zookeeper_hosts"))
