"""leakproof: Kafka web events to per-session aggregates in HBase, exactly once in effect.

Floors, each importing only from those below it (the table is ``floors.py``;
``tests/unit/test_layers.py`` checks every import, ``scripts/trip.py`` every call of a task):
the pure core (the top-level modules and ``model/``: config, events, codec, offsets,
sessions, session cells, the open-session index, outbox, oracle) -> ``ports/`` (what a range
and the driver need, as protocols) -> the adapters (``kafka/``, ``hbase/``,
``commit_stores/``, ``kerberos``) -> ``task/`` (executors: ``process_range`` over the
ports; ``worker`` builds the adapters) -> ``driver/`` (the only pyspark import) ->
``commands/`` (produce, verify, lag, rewind, stop, the model check) -> ``cli``.
"""

__version__ = "0.1.0"
