"""The driver: plans each batch's offset ranges, runs one Spark task per range, commits.

Floors inside the package, each importing only from those below it:

- ``job``: the Spark glue (StreamingContext, RDDs, the main loop) -- the only pyspark import;
- ``planning`` (start positions, partitions, ranges, budgets), ``committing`` (the numbered
  commit steps and the lease), ``progress`` (the per-batch line, JSON line and metrics) and
  ``control`` (stop reasons, idle clock, signals: the one object threads share);
  ``placement`` (which executor each partition's range should run on);
- ``ports`` (what the parts need from Kafka and HBase, as protocols) and ``batch`` (the
  types that travel with a batch).

Each part is owned by one thread: planning by Spark's batch generator, committing and
progress by the thread that runs batch outputs; they meet only in ``control``. In-memory
fakes of the ports (``leakproof.testing``) let every commit rule be tested without Kafka,
HBase or Spark.
"""
