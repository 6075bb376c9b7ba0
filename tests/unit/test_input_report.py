"""Each batch's input told to Spark's InputInfoTracker (driver/input_report.py), over a fake
Py4J gateway: the stream id, the records, the Kafka direct stream's metadata; a failure
logged once and never raised."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from leakproof.core.offsets import LogBounds, OffsetRange
from leakproof.driver import spark_compat
from leakproof.driver.batch import BatchPlan
from leakproof.driver.input_report import DESCRIPTION_KEY, OFFSETS_KEY, InputReport, description


@pytest.fixture(autouse=True)
def _fresh_lines() -> Any:
    """spark_compat caches each context's line by id(): the fakes' ids are reused."""
    yield
    spark_compat._lines.clear()


def plan(batch_ms: int, *spans: tuple[int, int]) -> BatchPlan:
    ranges = tuple(OffsetRange("t", p, a, b) for p, (a, b) in enumerate(spans))
    return BatchPlan(batch_ms, ranges, {p: LogBounds(0, b) for p, (_, b) in enumerate(spans)})


class Tracker:
    def __init__(self, fail: bool = False) -> None:
        self.got: list[tuple[Any, Any]] = []
        self.fail = fail

    def reportInfo(self, time: Any, info: Any) -> None:  # noqa: N802 - Spark's name
        if self.fail:
            raise RuntimeError("py4j.protocol.Py4JJavaError: no such method\n  at ...")
        self.got.append((time, info))


class JavaList(list[Any]):
    def add(self, item: Any) -> None:
        self.append(item)


class JavaMap(dict[str, Any]):
    def put(self, key: str, value: Any) -> None:
        self[key] = value


def fake_ssc(tracker: Tracker) -> tuple[Any, Any]:
    ns = SimpleNamespace
    jvm = ns(
        java=ns(util=ns(ArrayList=JavaList, HashMap=JavaMap)),
        scala=ns(Tuple4=lambda *a: a, util=ns(Properties=ns(
            versionNumberString=lambda: "2.13.16"))),
        org=ns(apache=ns(spark=ns(
            api=ns(python=ns(PythonUtils=ns(toScalaMap=dict, toList=list))),
            streaming=ns(Time=lambda ms: ("Time", ms),
                         kafka010=ns(OffsetRange=ns()),  # a package there, not a class
                         scheduler=ns(StreamInputInfo=lambda i, n, m: (i, n, m)))))))
    sc = ns(_jvm=jvm, version="4.0.0")
    jssc = ns(ssc=lambda: ns(scheduler=lambda: ns(inputInfoTracker=lambda: tracker)))
    tick = ns(_jdstream=ns(dstream=lambda: ns(id=lambda: 3)))
    return ns(_sc=sc, _jssc=jssc), tick


def test_each_batch_reports_its_records_and_ranges_as_the_kafka_stream_does() -> None:
    tracker = Tracker()
    ssc, tick = fake_ssc(tracker)
    report = InputReport(ssc, tick)
    report.report(plan(1000, (0, 10), (5, 5), (7, 107)))
    report.report(plan(2000, (10, 10), (5, 5), (107, 107)))
    assert report.reported == 2
    (t1, (sid, n, meta)), (t2, (_, n2, _)) = tracker.got
    assert (t1, sid, n, t2, n2) == (("Time", 1000), 3, 110, ("Time", 2000), 0)
    assert meta[OFFSETS_KEY] == [("t", 0, 0, 10), ("t", 1, 5, 5), ("t", 2, 7, 107)]
    assert meta[DESCRIPTION_KEY] == (
        "topic: t\tpartition: 2\toffsets: 7 to 107\tcount: 100\n"
        "topic: t\tpartition: 0\toffsets: 0 to 10\tcount: 10")


def test_a_failure_to_report_is_logged_once_and_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    tracker = Tracker(fail=True)
    ssc, tick = fake_ssc(tracker)
    report = InputReport(ssc, tick)
    with caplog.at_level(logging.DEBUG, "leakproof.driver.input_report"):
        for ms in (1000, 2000, 3000):
            report.report(plan(ms, (0, 10)))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no such method" in warnings[0].getMessage()
    assert "\n" not in warnings[0].getMessage()
    assert report.reported == 0


def test_the_description_skips_empty_ranges_largest_first() -> None:
    assert description(()) == ""
    assert description((OffsetRange("t", 0, 3, 3),)) == ""
    assert description((OffsetRange("t", 1, 0, 2), OffsetRange("t", 0, 0, 2))).splitlines() == [
        "topic: t\tpartition: 0\toffsets: 0 to 2\tcount: 2",
        "topic: t\tpartition: 1\toffsets: 0 to 2\tcount: 2"]


def test_kafkas_own_offset_range_when_on_the_class_path_else_tuples() -> None:
    from py4j.java_gateway import JavaClass

    class Kafka010(JavaClass):  # type: ignore[misc]  # what Py4J hands back for a class
        def __init__(self, refuse: bool) -> None:
            self.refuse = refuse

        def create(self, *args: object) -> object:
            if self.refuse:
                raise RuntimeError("no such method")
            return ("OffsetRange", *args)

    for refuse, expected in ((False, ("OffsetRange", "t", 0, 0, 10)), (True, ("t", 0, 0, 10))):
        tracker = Tracker()
        ssc, tick = fake_ssc(tracker)
        ssc._sc._jvm.org.apache.spark.streaming.kafka010.OffsetRange = Kafka010(refuse)
        report = InputReport(ssc, tick)
        report.report(plan(1000, (0, 10)))
        report.report(plan(2000, (10, 12)))
        (_, (_, _, meta)), (_, (_, _, later)) = tracker.got
        assert meta[OFFSETS_KEY] == [expected]
        assert later[OFFSETS_KEY][0][-1] == 12 and report.reported == 2
