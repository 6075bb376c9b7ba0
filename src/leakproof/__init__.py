"""leakproof: Kafka web events to per-session aggregates in HBase, exactly once in effect.

Floors, each importing only from those below it (the table is ``floors.py``;
``tests/unit/test_layers.py`` checks every import, ``testing.trip`` every call of a task):
the pure core (``core/``: config, events, codec, offsets, sessions, session cells, the
open-session index, outbox; ``model/``, the user's event model; ``testing``'s generator,
oracle and crash points) -> ``ports/`` (what a range and the driver need, as protocols) ->
the adapters (``kafka/``, ``hbase/``, ``commit_stores/``, ``security/``) -> ``task/``
(executors: ``process_ranges`` over the ports; ``worker`` builds the adapters; the fakes of
``testing`` beside it) -> ``driver/`` (the Spark glue; the only floor that imports pyspark)
-> ``commands/`` (produce, verify, lag, rewind, stop, the model check, the redrive) ->
``cli``, the entry point, which with ``__main__`` is all the top level holds.
"""

__version__ = "0.1.0"
