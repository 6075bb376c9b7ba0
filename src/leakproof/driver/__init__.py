"""The driver's half of exactly-once (``leakproof run`` on the driver): plan each batch's
offset ranges, send them to Spark as tasks, commit their offsets once every task succeeded.

- ``job``: the Spark glue -- the StreamingContext, each batch's plan, tasks and commit, the
  main loop -- and the one module that wires the others;
- ``spark_session``: the SparkContext and what the job asks of Spark besides the stream
  (settings, executors' locations, a batch's RDD with each range's preferred executor,
  Python workers started ahead of the first batch);
- ``spark_compat``: where Spark 3.5 and 4.x differ, decided in one place;
- ``startup``: a driver's start in the order that makes it safe (claim the tables, check
  the model, take the lease, plan the start), shared with the unit tests' driver rig;
- ``planning``: where the run starts, which partitions it reads, each batch's ranges;
- ``bounds``: where a bounded run (``--until-offsets`` / ``--until-time``) stops each
  partition;
- ``grouping``: which ranges of a batch run together in one Spark task;
- ``placement``: which executor each partition's range should run on, batch after batch;
- ``dispatch``: a batch's tasks sent to Spark (``task.worker.run_ranges``), ranges held
  back by moved keys run again alone;
- ``key_guard``: the driver's side of the partitions-added rule (``moved_keys``);
- ``rekeying``: the re-keying stage (``input.rekey``): each source partition copied onto the
  internal topic by one Spark task (``kafka.rekey``) before the batch's ranges are planned;
- ``committing``: the numbered commit steps and the lease check;
- ``batch``: the values that travel with one batch, from planning through commit to progress;
- ``control``: run control, the one object Spark's threads share (stop reasons, idle clock,
  batches in flight, backpressure rate), and the useful line of a failure;
- ``outcome``: how a run ended: its exit code and account;
- ``stopping``: the heartbeat and ``leakproof stop``'s durable requests;
- ``shutdown_hook``: the JVM's shutdown hook, so a SIGTERM lets the batch in flight commit;
- ``progress``: the per-batch line (text, or one JSON object);
- ``metrics``: the optional Prometheus endpoint and its service-discovery file;
- ``input_report``: each batch's input told to Spark, as its own Kafka direct stream does.

Each part is owned by one thread: planning by Spark's batch generator, committing and
progress by the thread that runs batch outputs; they meet only in ``control``.

Imports: the pure core, ``ports``, the adapters (``kafka/``, ``hbase/``, ``commit_stores/``)
and ``task`` (``dispatch`` and ``spark_session`` name ``task.worker``); never ``commands``
or ``cli`` (``leakproof.floors``, checked by ``tests/unit/test_layers.py``). Only ``job``
and ``spark_session`` import pyspark and ``input_report`` py4j (inside the functions that
need them); ``metrics`` imports prometheus_client, and ``job`` imports ``metrics`` only when
it starts the endpoint. The commit rules are unit tests over the fakes in
``leakproof.testing``.
"""
