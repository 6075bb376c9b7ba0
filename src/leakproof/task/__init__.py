"""The executor's half of exactly-once: what one Spark task does with its offset ranges.

Floors inside the package, each importing only from those below it:

- ``worker``: the Python worker's side (runs on executors) -- its caches with their lifetime,
  and ``run_ranges``, which builds the HBase and Kafka adapters and calls ``process_ranges``;
- ``process``: ``process_ranges``, the steps of a task's ranges in order (each step one
  store call for all of them), over the ports alone;
- ``index``: the open-session index loaded before the fold and saved after it, over the
  ports (the one place that checks a possibly stale entry against its session row);
- ``ports``: what a range needs from HBase and Kafka, as protocols (``leakproof.testing``
  has in-memory fakes, so every write-order and fence rule is a unit test).
"""
