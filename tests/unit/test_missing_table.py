"""A table that does not exist fails the call at once, named; an outage is still ridden out."""

from __future__ import annotations

import happybase  # noqa: F401  (puts Hbase_thrift on the path)
import pytest
from Hbase_thrift import IOError as HBaseIOError
from thriftpy2.transport import TTransportException

from leakproof.core.config import HBaseConfig
from leakproof.core.errors import HBaseUnavailable, TableMissing
from leakproof.hbase.connection import missing_table, ride_out

# what the Thrift server sends: the Java exception's name, message and stack as one text
NOT_FOUND = (b"org.apache.hadoop.hbase.TableNotFoundException: t1_stream_kafka_offsets\n\tat "
             b"org.apache.hadoop.hbase.client.ConnectionImplementation.locateRegionInMeta("
             b"ConnectionImplementation.java:1062)\n")


def test_the_missing_table_is_read_from_the_servers_error() -> None:
    assert missing_table(HBaseIOError(message=NOT_FOUND)) == "t1_stream_kafka_offsets"
    assert missing_table(HBaseIOError(message=b"org.apache.hadoop.hbase.TableNotFoundException"
                                              b": ns:web_sessions\n")) == "ns:web_sessions"
    assert missing_table(HBaseIOError(message=b"org.apache.hadoop.hbase."
                                              b"NotServingRegionException: region moved")) is None
    assert missing_table(TTransportException(message="connection reset")) is None


def test_a_missing_table_is_not_retried_and_its_name_and_the_prefix_are_given() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise HBaseIOError(message=NOT_FOUND)

    cfg = HBaseConfig(table_prefix="t1", outage_tolerance_s=60)
    with pytest.raises(TableMissing, match=r"table t1_stream_kafka_offsets does not exist .*"
                                           r"hbase.table_prefix: t1"):
        ride_out(cfg, "offsets history", attempt)
    assert len(calls) == 1


def test_an_outage_is_still_retried_until_the_tolerance() -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TTransportException(message="connection refused")
        return "answered"

    assert ride_out(HBaseConfig(outage_tolerance_s=60), "read", attempt) == "answered"
    assert len(calls) == 3
    with pytest.raises(HBaseUnavailable):
        ride_out(HBaseConfig(outage_tolerance_s=0), "read",
                 lambda: (_ for _ in ()).throw(TTransportException(message="refused")))
