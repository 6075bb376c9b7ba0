"""What proves leakproof right: the test support, kept in the package so ``leakproof verify``,
``leakproof produce``, the benchmarks and the tests share it.

- ``generator``: events from a seed (``leakproof produce``, every test's and bench's load);
- ``oracle``: the expected sessions computed from the events alone, sharing no code with the
  job's fold (``leakproof verify``, every correctness test);
- ``crashpoints``: named points where a test can kill a driver or a task
  (``LEAKPROOF_CRASH_AT``); inert unless that variable is set;
- the in-memory fakes, written as the real stores write (``tests/integration/
  test_store_contract.py`` holds them to a real HBase table): ``hbase_table`` (an HBase
  table: cells, timestamps, delete markers, batches, scans; crashes and late writes),
  ``driver_ports`` (the driver's ports), ``task_ports`` (a range's: the real stores over a
  fake table), ``redrive`` (a redrive's broker and dead-letter rows);
- ``trip``: one record's trip through a task, counted (``tests/unit/test_trip.py``,
  ``make trip``).

Floors (``leakproof.floors``): ``generator``, ``oracle`` and ``crashpoints`` are of the pure
core (the adapters and the task call the crash points); the fakes and the trip are of the
task's floor. This module imports nothing, so a crash point costs no fake's import.
"""
