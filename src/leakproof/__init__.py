"""leakproof: Kafka web events to per-session aggregates in HBase, exactly once in effect.

Floors, each importing only from those below it:
pure core (errors, config, events, codec, offsets, sessions, session_cells, open_index,
outbox) -> the ports (task/ports, driver/ports) -> adapters (kafka/, hbase/, commit_stores/)
-> task/ (executors: process_range over the ports; worker builds the adapters) and driver/
-> the operator commands (rewind, lag, verify, stop, produce) -> cli.
"""

__version__ = "0.1.0"
