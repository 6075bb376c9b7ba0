"""The ports: what the job's logic needs from Kafka and HBase, as protocols, with the types
that cross them. The adapters (``kafka/``, ``hbase/``, ``commit_stores/``) implement them;
``leakproof.testing`` has fakes of the stores, so the rules above them are unit tests.

- ``task``: what an executor's range needs (records and their decoder, session rows,
  partition rows, visits, the lease check, dead letters, the summaries' sink);
- ``driver``: what the driver needs (Kafka metadata, the commit store, the lease, the table
  set's owner, the run record, the group mirror);
- ``redrive``: what a redrive of dead letters needs (the dead-letter rows, the source
  partition written in transactions).

Imports: the pure core only, the one floor below (``leakproof.floors``), and so no pyspark,
kafka or happybase; ``tests/unit/test_layers.py`` checks both.
"""
