"""leakproof: Kafka web events to per-session aggregates in HBase, exactly once in effect.

Floors, each importing only from those below it:
pure core (errors, config, events, codec, offsets, sessions) -> adapters (kafka/, hbase/)
-> partition_task (executors) -> stream (driver) -> cli.
"""

__version__ = "0.1.0"
