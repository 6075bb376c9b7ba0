"""HBase adapters: the job's tables over the Thrift1 server, through happybase (its hot calls
through ``wire``).

- ``connection``: connections (plain or secured), table creation, the retried call
  (``ConnectionSlot``, ``riding_out``) and the checkAndPut happybase lacks;
- ``secure``: Kerberos (SASL/GSSAPI, or SPNEGO over HTTP) and TLS to the Thrift server, as
  happybase's transport;
- ``session_store``: the sessions table, a row's aggregates and fence in one put;
- ``partition_store``: a source partition's rows in the state table (watermark, pending
  mark, outbox, open-session index): what an executor's range reads and writes;
- ``visit_store``: each visitor's sessions in the state table (``sessions.by: gap``);
- ``state_store``: the driver's rows in the state table (lease, table owner, model, topic
  id, gaps, run record);
- ``dead_letters``: the dead-letter table and its redrive marks;
- ``row_scan``: a table read in row-key order, one batch of rows per Thrift call;
- ``wire/``: the hot Thrift1 calls encoded (``puts``) and decoded (``gets``) by hand.

The offsets table is ``commit_stores.hbase``'s. The stores implement ``ports.task`` and
``ports.driver`` (``dead_letters`` also ``ports.redrive``). Imports: the pure core and
``ports``, and of its own floor (the adapters) only the login, ``security.kerberos``, in ``secure``;
never ``task``, ``driver``, ``commands`` or ``cli`` (``leakproof.floors``, checked by
``tests/unit/test_layers.py``).
"""
