"""The parts of ``scripts/stack.py``, one module per job: shared paths and errors
(``base``), jars from Maven Central (``jars``), owned processes (``process``), readiness
waits (``readiness``), TLS certificates (``tls``), one module per service family
(``kafka``, ``hbase``, ``spark``, ``registry``, ``yarn``, ``secure``), the catalog of
services by name (``catalog``) and the whole-stack commands (``commands``). ``stack.py``
parses the command line and re-exports the names its importers use."""
