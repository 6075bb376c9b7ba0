"""The executor's half of exactly-once: what one Spark task does with its offset ranges.

- ``worker``: the Python worker's side (runs on executors): every executor cache with its
  lifetime, and ``run_ranges``, which builds the HBase and Kafka adapters and calls
  ``process_ranges``;
- ``process``: ``process_ranges``, a task's ranges through its numbered steps (read and
  decode, load, fold, write; one store call per step for all of them), over the ports alone;
- ``read``: step 1, each range's records decoded, and the ranges cut into runs that go
  through the later steps together;
- ``session_keys``: the session rule's seam in the steps (``ById``, ``ByGap``): which rows a
  step reaches, what its load completes, its folder, and what it writes around the rows;
- ``index``: the open-session index loaded before the fold and saved after it (the one place
  a possibly stale entry is checked against its session row);
- ``publish``: step 7, the summaries a range owes and their transaction (``output.emit``);
- ``sweep``: the retention sweep (``sessions.retention_days``): the closed sessions past a
  range's cut go into the fold's removals, so its writes delete their rows;
- ``kept_sessions``: the kept-rows cache in front of the session rows, so a range reads only
  the rows its partition's last ranges did not touch;
- ``kept_trail``: the kept rows shared by a host's Python workers, through files of the last
  ranges' deltas.

Imports: the pure core, ``ports`` and the adapters; never ``driver``, ``commands`` or
``cli`` (``leakproof.floors``, checked by ``tests/unit/test_layers.py``). Only ``worker``
imports an adapter (``kafka/``, ``hbase/``): ``process`` and
``index`` import no pyspark, kafka or happybase (checked there too), so every write-order
and fence rule is a unit test over the fakes in ``leakproof.testing``. Inside, ``worker``
calls ``process``, which calls ``read``, ``session_keys``, ``index``, ``sweep``,
``publish`` and ``kept_sessions``.
"""
