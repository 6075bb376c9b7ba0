"""The private and undocumented names of thriftpy2, happybase and kafka-python that
src/leakproof leans on, each checked here, so a library upgrade that drops or changes one
fails in this test and not in production (where some would only fall back, silently slower)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import happybase  # also registers Hbase_thrift, the module happybase generates from its IDL
import pytest
from kafka import TopicPartition

# (module, or an <instance> of INSTANCES; dotted attribute path; check; where src uses it).
# Checks: "" exists; "class"; "callable"; "call:N:kw,kw" the signature takes N positionals
# (self counted on a function looked up on a class) and those keywords; "has:KEY" a key of
# the dict; "eq:A|B" its str is one of these; "src:TEXT" in the object's source -- for
# attributes kafka-python's clients set in __init__ (they cannot be built without a broker).
Name = tuple[str, str, str, str]


def each(module: str, check: str, where: str, *paths: str) -> list[Name]:
    return [(module, path, check, where) for path in paths]


HBASE, ROW_PUTS, ROW_GETS = "hbase/connection.py", "hbase/wire/puts.py", "hbase/wire/gets.py"
SCAN, SECURE = "hbase/partition_store.py: short_scan", "hbase/secure.py"
LEAN, READER, KAFKA = "kafka/lean_fetch.py", "kafka/reader.py", "kafka/__init__.py"
APPENDER = "kafka/appender.py"
NAMES: list[Name] = [
    # happybase
    ("happybase", "Connection._refresh_thrift_client", "callable", f"{HBASE}: overridden"),
    ("happybase", "Connection.__init__", "src:self._refresh_thrift_client()", HBASE),
    ("<Connection>", "_protocol_class", "class", f"{HBASE}: the protocol over SASL"),
    ("<Connection>", "transport", "", f"{HBASE}: set to the secure transport"),
    ("<Connection>", "_table_name", "call:1:", f"{HBASE}: check_and_put"),
    ("<Connection>", "client.checkAndPut", "callable", f"{HBASE}: check_and_put"),
    *each("<Table>", "", f"{ROW_PUTS}, {ROW_GETS}, {SCAN}", "name", "connection"),
    ("<Table>", "connection.client.mutateRowsTs", "callable", f"{ROW_PUTS}: RowPuts"),
    ("<Table>", "connection.client.getRowsWithColumns", "callable", ROW_GETS),
    *each("<Table>", "callable", SCAN, "connection.client.scannerOpenWithScan",
          "connection.client.scannerGetList", "connection.client.scannerClose"),
    ("happybase.table", "TScan", "call:0:startRow,stopRow,caching", SCAN),
    ("Hbase_thrift", "Hbase", "", f"{HBASE}: TClient(Hbase, protocol)"),
    ("Hbase_thrift", "Mutation", "call:0:column,value,isDelete,writeToWAL", HBASE),
    ("Hbase_thrift", "IOError", "call:0:message", f"{ROW_GETS}: read_reply"),
    ("Hbase_thrift", "TRowResult", "call:0:row,columns", SCAN),
    ("Hbase_thrift", "TCell", "call:0:value", SCAN),
    # thriftpy2
    ("thriftpy2.thrift", "TClient", "call:2:", HBASE),
    ("thriftpy2.thrift", "TClient._recv", "call:2:", f"{ROW_PUTS}: RowPuts.send"),
    ("thriftpy2.thrift", "TApplicationException", "call:2:", f"{ROW_GETS}: read_reply"),
    ("<Connection>", "client._seqid", "", f"{ROW_PUTS}: RowPuts.send, {ROW_GETS}: get_rows"),
    *each("<Connection>", "callable", f"{ROW_PUTS}: send_request", "client._oprot.trans.write",
          "client._oprot.trans.flush"),
    ("<Connection>", "client._iprot.trans.read", "callable", f"{ROW_GETS}: get_rows"),
    # speaks_strict_binary knows the protocol by its class's name (TBinaryProtocol: no Cython)
    ("<Connection>", "client._oprot.__class__.__name__", "eq:TCyBinaryProtocol|TBinaryProtocol",
     ROW_PUTS),
    ("<Connection>", "client._oprot.strict_write", "eq:True", f"{ROW_PUTS}: speaks_strict_binary"),
    ("thriftpy2.transport", "TSocket", "call:0:host,port,socket_timeout", SECURE),
    ("thriftpy2.transport", "TTransportException", "call:0:message", SECURE),
    ("thriftpy2.transport.sasl", "TCySaslClientTransport", "class", SECURE),
    # the compiled twin's source is not inspectable; the pure one calls GssapiSasl the same way
    ("thriftpy2.transport.sasl", "TSaslClientTransport", "src:self.sasl.getError()", SECURE),
    *each("thriftpy2.protocol", "call:1:decode_response", SECURE, "binary.TBinaryProtocol",
          "compact.TCompactProtocol"),
    ("thriftpy2.http", "THttpClient", "call:1:ssl_context_factory,http_header_factory,keep_alive",
     SECURE),
    ("thriftpy2.http", "THttpHeaderFactory.get_headers", "callable", f"{SECURE}: _Negotiate"),
    ("<THttpClient>", "_THttpClient__http.connect", "callable", f"{SECURE}: open"),
    ("<THttpClient>", "_THttpClient__wbuf.getvalue", "callable", f"{SECURE}: flush"),
    ("<THttpClient>", "_THttpClient__send_request", "call:1:", f"{SECURE}: flush"),
    ("thriftpy2.http", "THttpClient._THttpClient__send_request", "src:self.code, self.message",
     f"{SECURE}: flush"),
    # kafka-python
    ("kafka.net.compat", "KafkaNetClient", "class", f"{KAFKA}: _net_client"),
    ("kafka.net.selector", "NetworkSelector.DEFAULT_CONFIG", "has:slow_task_threshold_secs", KAFKA),
    ("kafka.net.selector", "log.name", "eq:kafka.net.selector", f"{KAFKA}: _SELECTOR_LOG"),
    ("kafka.net.selector", "", "src:blocking the event loop", f"{KAFKA}: _StallCounter"),
    ("kafka.net.manager", "", "src:'Connection failed: %s', exc", "kafka/admin.py: _Refusals"),
    ("kafka.errors", "KafkaError.__str__", "src:self.__class__.__name__", "kafka/admin.py"),
    *each("kafka", "has:kafka_client", f"{KAFKA}, kafka/admin.py: settings filtered by it",
          "KafkaProducer.DEFAULT_CONFIG", "KafkaAdminClient.DEFAULT_CONFIG",
          "KafkaConsumer.DEFAULT_CONFIG"),
    ("kafka", "KafkaConsumer.__init__", "src:self._fetcher = Fetcher(", f"{LEAN}, {READER}"),
    ("kafka", "KafkaProducer.__init__", "src:self._sender = ", f"{KAFKA}: close_now"),
    ("kafka.producer.sender", "Sender.force_close", "callable", f"{KAFKA}: close_now"),
    *each("kafka", "src:self._accumulator = ", APPENDER, "KafkaProducer.__init__"),
    *each("kafka", "src:self._transaction_manager = ", APPENDER, "KafkaProducer.__init__"),
    ("kafka.producer.sender", "Sender.wakeup", "call:1:", APPENDER),
    ("kafka.producer.record_accumulator", "RecordAccumulator.append", "call:6:", APPENDER),
    # (future, batch_is_full, new_batch_created, abort_for_new_batch)
    ("kafka.producer.record_accumulator", "RecordAccumulator.append",
     "src:return future, batch_is_full, True, False", APPENDER),
    *each("kafka.producer.transaction_manager", "call:1:", APPENDER,
          "TransactionManager._fail_if_not_ready_for_send", "TransactionManager.last_error.fget"),
    *each("kafka.future", "src:self.is_done = False", f"{KAFKA}: acknowledged",
          "Future.__init__"),
    ("kafka.producer.transaction_manager",
     "TransactionManager.maybe_add_partition_to_transaction", "call:2:", APPENDER),
    # the bulk path (leakproof_native): batches filled in the accumulator's own deques
    *each("<RecordAccumulator>", "", f"{APPENDER}: bulk", "_batches", "_incomplete.add",
          "_incomplete.all"),
    ("<RecordAccumulator>", "_tp_lock", "call:1:", f"{APPENDER}: bulk"),
    *(("<RecordAccumulator>", "config", f"has:{key}", f"{APPENDER}: _new_batch")
      for key in ("message_version", "compression_attrs", "batch_size")),
    ("kafka.producer.record_accumulator", "RecordAccumulator.deallocate",
     "src:self._incomplete.remove(batch)", f"{APPENDER}: a split batch leaves _incomplete"),
    ("kafka.producer.producer_batch", "ProducerBatch", "call:2:now", f"{APPENDER}: _new_batch"),
    *each("<ProducerBatch>", "", f"{APPENDER}: bulk", "records", "last_append", "is_done",
          "final_state", "produce_future", "topic_partition"),
    ("kafka.producer.producer_batch", "FinalState.SUCCEEDED", "", APPENDER),
    ("kafka.producer.producer_batch", "ProducerBatch._complete_future",
     "src:self.produce_future.success((base_offset, timestamp_ms, record_exceptions_fn))",
     f"{APPENDER}: a failed batch's error"),
    ("kafka.record.memory_records", "MemoryRecordsBuilder", "call:3:", f"{APPENDER}: bulk"),
    *each("<MemoryRecordsBuilder>", "", f"{APPENDER}: _fill", "_builder", "_next_offset",
          "_closed"),
    *each("<MemoryRecordsBuilder>", "", f"{APPENDER}: _fill", "_builder._first_timestamp",
          "_builder._max_timestamp", "_builder._num_records", "_builder._last_offset",
          "_builder._buffer", "_builder._batch_size"),
    ("kafka", "KafkaConsumer.__init__", "src:self.config = ", f"{READER}: read_range"),
    ("kafka.consumer.fetcher", "Fetcher.__init__", "src:self.config = ", f"{LEAN}, {READER}"),
    *(("kafka.consumer.fetcher", "Fetcher.DEFAULT_CONFIG", f"has:{key}", f"{LEAN}, {READER}")
      for key in ("key_deserializer", "value_deserializer", "max_partition_fetch_bytes")),
    ("kafka.consumer.fetcher", "Fetcher", "src:self.config['max_partition_fetch_bytes']", READER),
    ("kafka.consumer.fetcher", "Fetcher", "src:self.PartitionRecords(", f"{LEAN}: lean_fetches"),
    ("kafka.consumer.fetcher", "Fetcher.PartitionRecords._unpack_records", "call:5:", LEAN),
    *each("<PartitionRecords>", "", LEAN, "check_crcs", "topic_partition", "leader_epoch",
          "next_fetch_offset", "bytes_read", "records_read", "isolation_level",
          "aborted_producer_ids"),
    *each("<PartitionRecords>", "call:1:", LEAN, "_consume_aborted_transactions_up_to",
          "_contains_abort_marker", "_is_batch_aborted"),
    ("<PartitionRecords>", "drain", "call:0:", LEAN),
    ("kafka.protocol.consumer", "IsolationLevel.READ_COMMITTED", "", LEAN),
    ("kafka.record.memory_records", "MemoryRecords.next_batch", "call:1:", LEAN),
    ("kafka.record.default_records", "DefaultRecordBatch", "call:1:", LEAN),
    ("kafka.record.default_records", "DefaultRecordBatchBuilder", "call:0:magic,compression_type,"
     "is_transactional,producer_id,producer_epoch,base_sequence,batch_size", LEAN),
    ("kafka.record.default_records", "DefaultRecordBatchBuilder.append",
     "call:2:timestamp,key,value,headers", LEAN),
    *each("<DefaultRecordBatch>", "call:0:", LEAN, "_maybe_uncompress", "validate_crc",
          "has_producer_id"),
    *each("<DefaultRecordBatch>", "", LEAN, "_buffer", "_pos", "max_timestamp", "timestamp_type",
          "records_count", "base_offset", "first_timestamp", "magic", "leader_epoch",
          "next_offset", "size_in_bytes", "last_offset", "producer_id", "is_control_batch"),
    *each("kafka.record.legacy_records", "", f"{LEAN}: _legacy", "LegacyRecordBatch.magic",
          "LegacyRecord.validate_crc", "LegacyRecord.size_in_bytes", "LegacyRecord.headers"),
]


def resolve(module: str, path: str) -> Any:
    obj: Any = INSTANCES[module]() if module in INSTANCES else importlib.import_module(module)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def v2_batch() -> bytes:
    builder = resolve("kafka.record.default_records", "DefaultRecordBatchBuilder")(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1024)
    builder.append(0, timestamp=1, key=b"k", value=b"v", headers=[])
    return bytes(builder.build())


def http_client() -> Any:
    client = resolve("thriftpy2.http", "THttpClient")("http://localhost:9090/")
    client.open()  # makes its HTTPConnection, which connects only when asked
    return client


# Objects that hold their names only once built; none touches the network.
INSTANCES: dict[str, Callable[[], Any]] = {
    "<Connection>": lambda: happybase.Connection(autoconnect=False, table_prefix="p"),
    "<Table>": lambda: resolve("<Connection>", "").table("t"),
    "<THttpClient>": http_client,
    "<PartitionRecords>": lambda: resolve("kafka.consumer.fetcher", "Fetcher.PartitionRecords")(
        0, TopicPartition("t", 0), resolve("kafka.record.memory_records", "MemoryRecords")(
            v2_batch())),
    "<DefaultRecordBatch>": lambda: resolve("kafka.record.default_records",
                                            "DefaultRecordBatch")(v2_batch()),
    "<RecordAccumulator>": lambda: resolve("kafka.producer.record_accumulator",
                                           "RecordAccumulator")(),
    "<MemoryRecordsBuilder>": lambda: resolve("kafka.record.memory_records",
                                              "MemoryRecordsBuilder")(2, 0, 1024),
    "<ProducerBatch>": lambda: resolve("kafka.producer.producer_batch", "ProducerBatch")(
        TopicPartition("t", 0), resolve("<MemoryRecordsBuilder>", "")),
}

CHECKS: dict[str, Callable[[Any, str], object]] = {
    "": lambda obj, arg: True,
    "class": lambda obj, arg: inspect.isclass(obj),
    "callable": lambda obj, arg: callable(obj),
    "call": lambda obj, arg: inspect.signature(obj).bind(  # TypeError if it does not fit
        *range(int(arg.partition(":")[0])),
        **dict.fromkeys(filter(None, arg.partition(":")[2].split(",")))),
    "eq": lambda obj, arg: str(obj) in arg.split("|"),
    "has": lambda obj, arg: arg in obj,
    "src": lambda obj, arg: arg in inspect.getsource(obj),
}


@pytest.mark.parametrize(("module", "path", "check", "where"), NAMES,
                         ids=[f"{m}:{p}:{c}" for m, p, c, _ in NAMES])
def test_the_name_is_there(module: str, path: str, check: str, where: str) -> None:
    kind, _, arg = check.partition(":")
    try:
        assert CHECKS[kind](resolve(module, path), arg), f"{check} fails: {where} needs it"
    except (ImportError, AttributeError, TypeError) as exc:
        pytest.fail(f"{type(exc).__name__}: {exc} -- {where} needs it")
