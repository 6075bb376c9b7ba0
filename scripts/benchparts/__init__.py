"""The parts of ``scripts/bench.py``, one module per job: what the environment asks of a run
(``settings``), the load put on Kafka (``load``: the pre-fill, the paced producer), CPU and
memory accounting and a batch's CPU floor (``cpu``), py-spy on the job's workers
(``worker_profile``), the job's log lines (``joblog``), a drain and the samplers around it
(``drain``), the job (``job``), the Structured Streaming peer (``peer``), the raw ceiling
(``ceiling``), the region server's log beside the batches (``hbase_log``), the latency mode
(``latency``), the run's HBase tables (``tables``), the result (``report``) and the
throughput run in order (``throughput``). ``bench.py`` is the entry point and re-exports the
names its importers use."""
