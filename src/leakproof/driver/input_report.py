"""Each batch's input told to Spark, as Spark's own Kafka direct stream tells it.

leakproof's batches come from a ``queueStream`` tick, an input stream whose queue is empty:
left alone, Spark's Streaming tab, its StreamingListeners and its REST API
(``/api/v1/applications/<id>/streaming/batches``) show 0 input records for every batch.
``DirectKafkaInputDStream.compute`` reports each batch to the scheduler's InputInfoTracker as
``StreamInputInfo(its input stream id, the records, {"offsets": its offset ranges as a Scala
List, "Description": one line per non-empty range, largest first})``; ``InputReport`` does the
same for the tick's stream id. It is called from the planning callback (``transform``), which
Spark runs while it generates the batch's jobs -- before the JobGenerator reads the tracker
for that batch time, as the Kafka stream's ``compute`` runs then.

The records are offsets counted, as the Kafka stream's are (its ``KafkaRDD.count`` is the
ranges' sum): a transactional topic's commit markers and aborted records count. The
"offsets" entry holds Kafka's own ``OffsetRange`` objects when spark-streaming-kafka-0-10 is
on the driver's class path, else each range as a ``(topic, partition, from, until)`` Scala
tuple (the ``OffsetRange.OffsetRangeTuple`` shape; the numbers boxed as Py4J passes them).

Best effort: a failure to report never fails a batch. It is logged once (a warning), then
at debug level; each later batch tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from leakproof.core.offsets import OffsetRange
from leakproof.driver import spark_compat
from leakproof.driver.batch import BatchPlan

log = logging.getLogger(__name__)

DESCRIPTION_KEY = "Description"  # StreamInputInfo.METADATA_KEY_DESCRIPTION
OFFSETS_KEY = "offsets"  # DirectKafkaInputDStream's key for the ranges


def description(ranges: Sequence[OffsetRange]) -> str:
    """The ranges as the Kafka direct stream describes them in the Streaming tab: the
    non-empty ones, largest first, one line each."""
    shown = sorted((r for r in ranges if r.count), key=lambda r: (-r.count, r.partition))
    return "\n".join(f"topic: {r.topic}\tpartition: {r.partition}\toffsets: "
                     f"{r.from_offset} to {r.until_offset}\tcount: {r.count}" for r in shown)


class InputReport:
    """Reports each planned batch of one StreamingContext's tick stream to its
    InputInfoTracker. Used by the planning thread only."""

    def __init__(self, ssc: Any, tick: Any) -> None:
        """``ssc``: PySpark's StreamingContext; ``tick``: the DStream its queueStream made."""
        self._ssc, self._tick = ssc, tick
        self._jvm: Any = None
        self._tracker: Any = None
        self._stream_id: int | None = None
        self._range_class: Any = None  # Kafka's OffsetRange, if on the class path
        self._warned = False
        self.reported = 0  # batches reported (for tests and the log)

    def report(self, plan: BatchPlan) -> None:
        """Tell Spark this batch's records and ranges; never raises."""
        try:
            self._report(plan)
            self.reported += 1
        except Exception as exc:  # the UI's figures must never fail a batch
            if not self._warned:
                self._warned = True
                log.warning("cannot report batch inputs to Spark's InputInfoTracker (the "
                            "Streaming tab and its REST API show 0 records per batch): %s",
                            str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
            log.debug("batch %d: input not reported", plan.batch_ms, exc_info=True)

    def _report(self, plan: BatchPlan) -> None:
        if self._tracker is None:
            self._resolve()
        jvm, sc = self._jvm, self._ssc._sc
        spark = spark_compat.line(sc)
        ranges = jvm.java.util.ArrayList()
        for r in plan.ranges:
            ranges.add(self._range(r))
        metadata = spark.to_scala_map(jvm, {OFFSETS_KEY: spark.to_scala_list(jvm, ranges),
                                            DESCRIPTION_KEY: description(plan.ranges)})
        info = jvm.org.apache.spark.streaming.scheduler.StreamInputInfo(
            self._stream_id, plan.records, metadata)
        self._tracker.reportInfo(jvm.org.apache.spark.streaming.Time(plan.batch_ms), info)

    def _resolve(self) -> None:
        """The tick's input stream id and the tracker (it exists once the context started)."""
        from py4j.java_gateway import JavaClass

        self._jvm = self._ssc._sc._jvm
        # the tick's JavaInputDStream -> its QueueInputDStream, whose id the UI lists
        self._stream_id = int(self._tick._jdstream.dstream().id())
        tracker = self._ssc._jssc.ssc().scheduler().inputInfoTracker()
        if tracker is None:
            raise RuntimeError("the StreamingContext has no InputInfoTracker (not started)")
        found = self._jvm.org.apache.spark.streaming.kafka010.OffsetRange
        self._range_class = found if isinstance(found, JavaClass) else None
        self._tracker = tracker

    def _range(self, r: OffsetRange) -> Any:
        if self._range_class is not None:
            try:
                return self._range_class.create(r.topic, r.partition, r.from_offset,
                                                r.until_offset)
            except Exception:  # another OffsetRange than Kafka 0.10's: the tuples then
                log.debug("Kafka's OffsetRange.create refused a range", exc_info=True)
                self._range_class = None
        return self._jvm.scala.Tuple4(r.topic, r.partition, r.from_offset, r.until_offset)
