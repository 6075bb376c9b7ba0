"""Thrift1 calls encoded and decoded here instead of through happybase and thriftpy2: the
hot ones (whole-row puts, multi-row gets) cost a tenth of the CPU written directly, byte for
byte what thriftpy2 writes (``tests/unit/test_row_puts.py``, ``test_row_gets.py``). Whether a
connection can carry them -- it speaks the strict binary protocol -- is decided once, when
it is made (``hbase.connection.connect``); other connections keep happybase's own calls."""
