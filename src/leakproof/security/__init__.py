"""The Kerberos login every Kafka and HBase client of a secured cluster shares
(``kerberos``: a KDC client, so of the adapters' floor; ``kafka/`` and ``hbase/`` call it).

Imports: the pure core only (``leakproof.floors``).
"""
