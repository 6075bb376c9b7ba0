"""HBase adapters over the Thrift1 server (happybase): sessions, offsets, state, dead letters."""
