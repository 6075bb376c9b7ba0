"""The ports: what the executor's range (``task``) and the driver (``driver``) need from
the outside world, as protocols, with the types that cross them. The adapters (``kafka/``,
``hbase/``, ``commit_stores/``) implement them; nothing here imports an adapter."""
