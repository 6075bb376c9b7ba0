"""``input.rekey``: its config and refusals, the stage's pure rules (names, placement, how far
a task goes, the source header), the decoder that finds the session key of an unkeyed record,
and the oracle's check of the internal topic against its source."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from leakproof.commands.redrive import Lanes, count
from leakproof.core import codec, config
from leakproof.core.dead_letter import ALL, ORIGIN_HEADER, SENT, DeadLetter
from leakproof.core.errors import ConfigError
from leakproof.core.events import WebEvent
from leakproof.core.moved_keys import home
from leakproof.core.rekey import (
    MAX_RECORDS,
    REFRESH_S,
    SOURCE_HEADER,
    RekeyReport,
    SourceRewind,
    last_copy,
    parse_source,
    placement,
    placer,
    rekey_group,
    source_header,
    source_of,
    stage_until,
    stage_work,
    transactional_id,
    with_source,
)
from leakproof.kafka.records import KafkaRecord
from leakproof.model.spec import web_model
from leakproof.testing import oracle
from leakproof.testing.redrive import FakeBroker, FakeDeadLetterRows

from .test_redrive import Crash, attempt, copies, crasher, letter

KAFKA = {"bootstrap_servers": "h:9092", "topic": "logs", "group_id": "g"}
UNSEQUENCED = {"events": {"session_key": "session_id", "event_time": "ts"},
               "aggregates": {"n": {"fn": "count"}}}
GAP_FOLD = {"by": "gap", "late": "fold", "inactivity_gap_s": 600}


def load(rekey: Any = None, **sections: Any) -> config.Config:
    data: dict[str, Any] = {"kafka": dict(KAFKA), **sections}
    if rekey is not None:
        data["input"] = {"rekey": rekey}
    return config.from_dict(data)


def refusal(rekey: Any, **sections: Any) -> str:
    with pytest.raises(ConfigError) as err:
        load(rekey, **sections)
    return str(err.value)


def test_rekey_reads_its_field_and_defaults_to_a_topic_named_after_the_source() -> None:
    cfg = load({"field": "session_id"})
    assert cfg.input.rekey == config.Rekey("session_id")
    inner = config.session_stage(cfg)
    assert (inner.kafka.topic, inner.kafka.partitions, inner.kafka.isolation_level) == (
        "logs.leakproof-rekey", None, "read_committed")
    assert inner.input.rekey is None and config.session_stage(inner) == inner
    assert config.session_stage(load()) == load()  # without rekey: the config itself
    named = load({"field": "session_id", "topic": "logs-by-session", "partitions": 12},
                 kafka={**KAFKA, "isolation_level": "read_uncommitted", "partitions": [0, 1]})
    assert named.input.rekey == config.Rekey("session_id", "logs-by-session", 12)
    inner = config.session_stage(named)
    assert (inner.kafka.topic, inner.kafka.partitions, inner.kafka.isolation_level) == (
        "logs-by-session", None, "read_committed")
    assert named.kafka.partitions == (0, 1)  # the stage reads the source as configured


@pytest.mark.parametrize(("rekey", "message"), [
    ({}, "'input.rekey.field' is required"),
    ({"field": "session_id", "by": "x"}, "unknown key 'input.rekey.by'"),
    ({"field": "session_id", "partitions": 0}, "'input.rekey.partitions' must be >= 1"),
    ({"field": "session_id", "topic": "a b"}, "'input.rekey.topic' = 'a b' has characters"),
    ("session_id", "'input.rekey' must be a mapping"),
    ({"field": "user_id"}, "'input.rekey.field' = 'user_id' differs from "
                           "'events.session_key' = 'session_id'"),
])
def test_rekey_settings_are_checked_naming_the_key(rekey: Any, message: str) -> None:
    assert message in refusal(rekey)


def test_orders_that_re_keying_cannot_keep_are_refused_naming_the_way_out() -> None:
    rekey = {"field": "session_id"}
    by_id = refusal(rekey, **UNSEQUENCED)
    assert re.search(r"'sessions.by: id' needs 'events.sequence'.*use sessions.by: gap with "
                     r"sessions.late: fold", by_id)
    count = refusal(rekey, **UNSEQUENCED, sessions={**GAP_FOLD, "late": "count"})
    assert re.search(r"'sessions.late: count' needs 'events.sequence'.*use sessions.late: "
                     r"fold", count)
    cut = refusal(rekey, **UNSEQUENCED, sessions={**GAP_FOLD, "max_duration_s": 3600})
    assert "'sessions.max_duration_s' needs 'events.sequence'" in cut
    keyed = refusal(rekey, events={"session_key": "@key", "event_time": "ts"},
                    aggregates={"n": {"fn": "count"}}, sessions=GAP_FOLD)
    assert "@key (the Kafka key) is what re-keying replaces" in keyed
    # exact where order cannot matter: gap + fold, or a sequence (the web model has seq)
    assert load(rekey, **UNSEQUENCED, sessions=GAP_FOLD).input.rekey is not None
    assert load(rekey).input.rekey is not None
    assert load(rekey, sessions={**GAP_FOLD, "late": "count"}).input.rekey is not None


def test_names_a_restarted_copy_shares() -> None:
    assert transactional_id("g", "logs", 3) == "leakproof-rekey-g-logs-3"
    assert rekey_group("g") == "g.rekey"


def test_an_event_goes_where_kafkas_default_partitioner_puts_its_session_key() -> None:
    key, to = placement("c-42", None, 1, 8)
    assert (key, to) == (b"c-42", home(b"c-42", 8))
    assert placement("c-42", b"random", 1, 8) == (b"c-42", home(b"c-42", 8))
    # not an event: forwarded under its own key, a null one to the source's own number
    assert placement(None, b"junk", 5, 4) == (b"junk", home(b"junk", 4))
    assert placement(None, None, 5, 4) == (None, 1)
    # a task's placer gives the same places, whatever it remembered
    place = placer(5, 4)
    for session_key, key in [("c-42", None), ("c-42", b"random"), (None, b"junk"),
                             (None, None), ("c-42", None)]:
        assert place(session_key, key) == placement(session_key, key, 5, 4)


def test_a_stage_task_goes_to_the_readable_end_or_its_budget() -> None:
    assert stage_until(100, 180, None) == 180
    assert stage_until(100, 180, 50) == 150
    assert stage_until(100, 100, 50) == 100
    assert stage_until(100, 90, 50) == 100  # never below its start
    assert stage_until(0, 10**9, None) == MAX_RECORDS


def test_the_source_header_names_the_copied_record() -> None:
    headers = with_source([("trace", b"1"), (SOURCE_HEADER, b"forged:0:0")], "logs", 2, 17)
    assert headers == [("trace", b"1"), (SOURCE_HEADER, b"logs:2:17")]
    assert source_header(headers) == ("logs", 2, 17)
    assert source_header([("trace", b"1")]) is None
    assert parse_source(b"a.b-c:11:123456") == ("a.b-c", 11, 123456)
    assert parse_source(b"nonsense") is None
    assert parse_source(None) is None


def test_the_stage_decoder_finds_the_session_key_of_an_unkeyed_record() -> None:
    event = WebEvent("s-1", "u", 0, 1_700_000_000_000, "pageview", "/", 200, 10)
    value = codec.encode_value(event)
    with pytest.raises(codec.DecodeError, match="null key"):
        codec.Decoder(web_model()).decode(None, value, topic="logs", partition=0, offset=5)
    stage = codec.Decoder(web_model(), key_checked=False)
    for key in (None, b"random"):
        found = stage.decode(key, value, topic="logs", partition=0, offset=5)
        assert found.session_id == "s-1"
    with pytest.raises(codec.DecodeError, match="tombstone"):
        stage.decode(None, None, topic="logs", partition=0, offset=5)


def test_the_oracle_finds_a_copy_missing_doubled_misplaced_or_changed() -> None:
    source = {(0, 0): (None, b"v0", "a"), (0, 1): (b"k", b"v1", "b"),
              (1, 0): (None, b"bad", None)}
    exact = [(home(b"a", 3), b"a", b"v0", "logs:0:0"), (home(b"b", 3), b"b", b"v1", "logs:0:1"),
             (2, None, b"bad", "logs:1:0")]
    assert oracle.rekey_problems(source, exact, 3) == []
    doubled = oracle.rekey_problems(source, [*exact, exact[0]], 3)
    assert doubled == ["1 source records copied more than once, e.g. [(0, 0)]"]
    assert oracle.rekey_problems(source, exact[1:], 3) == [
        "1 source records not copied, e.g. [(0, 0)]"]
    moved = (home(b"a", 3) + 1) % 3
    assert "belongs in" in oracle.rekey_problems(
        source, [(moved, b"a", b"v0", "logs:0:0"), *exact[1:]], 3)[0]
    assert "does not carry its value" in oracle.rekey_problems(
        source, [(home(b"a", 3), b"a", b"other", "logs:0:0"), *exact[1:]], 3)[0]
    assert "names no source" in oracle.rekey_problems(
        source, [*exact, (0, b"a", b"v0", None)], 3)[0]
    # a record the stage forwarded as not an event (its schema came later) is exact when
    # its copy is a dead letter, and only then
    then = [(0, None, b"v0", "logs:0:0"), *exact[1:]]
    assert oracle.rekey_problems(source, then, 3, dead={"logs:0:0"}) == []
    assert "does not carry its value" in oracle.rekey_problems(source, then, 3)[0]


class _Meta:
    """The stage's Kafka metadata: source partitions 0-2, the internal topic's 4."""

    def __init__(self, committed: dict[int, int]) -> None:
        self.committed = committed

    def partitions(self, topic: str) -> list[int]:
        return [0, 1, 2, 3] if topic.endswith(".leakproof-rekey") else [0, 1, 2]

    def log_bounds(self, topic: str, partitions: Any) -> dict[int, Any]:
        from leakproof.core.offsets import LogBounds

        return {p: LogBounds(0, 100 * (p + 1), 100 * (p + 1)) for p in partitions}

    def group_offsets(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
        assert (group, topic) == ("g.rekey", "logs")
        return {p: (o, "") for p, o in self.committed.items()}


class _Spark:
    """Records the work a stage would send to Spark, runs nothing."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def setJobDescription(self, _text: str) -> None:  # noqa: N802 - Spark's name
        pass

    def parallelize(self, work: list[Any], _slices: int) -> Any:
        self.sent.append(work)
        return self

    def mapPartitions(self, _task: Any) -> Any:  # noqa: N802 - Spark's name
        return self

    def collect(self) -> list[Any]:
        from leakproof.core.rekey import RekeyReport

        return [RekeyReport(p, 0, end, end) for p, end, _refresh in self.sent[-1]]


def test_the_stage_sends_a_task_only_for_partitions_not_yet_copied_to_their_end() -> None:
    from leakproof.driver.rekeying import RekeyStage

    cfg = load({"field": "session_id"})
    spark = _Spark()
    # p0 copied to its end, p1 part way, p2 never: p1 and p2 get a task, to their ends;
    # p0 one that only commits its offset again, as this driver never did (REFRESH_S)
    stage = RekeyStage(cfg, _Meta({0: 100, 1: 150}))  # type: ignore[arg-type]
    assert stage.run(spark, 1) == 100 + 200 + 300
    assert spark.sent == [[(0, 100, True), (1, 200, False), (2, 300, False)]]
    # every partition at its end and committed by this driver within the hour: no Spark job
    idle = RekeyStage(cfg, _Meta({0: 100, 1: 200, 2: 300}))  # type: ignore[arg-type]
    idle.run(spark, 2)  # its first batch commits each offset again
    assert spark.sent[-1] == [(0, 100, True), (1, 200, True), (2, 300, True)]
    assert idle.run(spark, 3) == 0
    assert len(spark.sent) == 2


def test_another_groups_stage_on_the_same_source_is_refused_on_the_default_topic() -> None:
    from leakproof.driver.rekeying import RekeyStage

    class Shared(_Meta):
        def group_ids(self) -> list[str]:
            return ["g.rekey", "other.rekey", "unrelated"]

        def group_offsets(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
            return {0: (5, "")} if group == "other.rekey" else {}

    with pytest.raises(ConfigError, match=re.escape(
            "the group other.rekey also re-keys logs, maybe into the default topic "
            "logs.leakproof-rekey")) as err:
        RekeyStage(load({"field": "session_id"}), Shared({}))._alone()  # type: ignore[arg-type]
    assert "give 'input.rekey.topic' a name of this job's own" in str(err.value)
    # a topic of its own: nothing to share
    RekeyStage(load({"field": "session_id", "topic": "logs-g"}),
               Shared({}))._alone()  # type: ignore[arg-type]


def _fed(targets: dict[int, int], copies: dict[int, list[tuple[int, int]]]) -> SourceRewind:
    """A SourceRewind fed each internal partition's copies, in offset order: internal
    partition -> [(source partition, source offset)] at internal offsets 0, 1, 2, ..."""
    found = SourceRewind("web", targets)
    for q, sources in copies.items():
        for offset, (p, o) in enumerate(sources):
            found.feed(q, offset, [("other", b"x"), (SOURCE_HEADER, source_of("web", p, o))])
    return found


def test_a_source_rewind_goes_back_to_each_internal_partitions_first_copy_it_asks_for() -> None:
    """Source partitions 0 and 1 interleave in internal partition 0; 1 alone is in 2. Going
    back to 0@2 and 1@1 reads again from the first copy at or after either, in each
    internal partition; one holding neither stays where it is."""
    copies = {0: [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (0, 3)],
              1: [(2, 0), (2, 1)],
              2: [(1, 2), (1, 3)]}
    found = _fed({0: 2, 1: 1}, copies)
    assert found.problems() == []
    assert found.positions({0: 6, 1: 2, 2: 2}) == {0: 3, 1: 2, 2: 0}
    # a position already further back stays (a rewind never moves the job forward)
    assert found.positions({0: 1, 1: 2, 2: 2}) == {0: 1, 1: 2, 2: 0}


def test_a_source_rewind_ignores_other_topics_copies_and_records_without_the_header() -> None:
    found = SourceRewind("web", {0: 0})
    found.feed(0, 0, [(SOURCE_HEADER, source_of("other", 0, 5))])
    found.feed(0, 1, [])
    found.feed(0, 2, [(SOURCE_HEADER, b"not coordinates")])
    found.feed(0, 3, [(SOURCE_HEADER, source_of("web", 0, 0))])
    assert found.positions({0: 4}) == {0: 3}


def test_a_source_rewind_forward_or_below_retention_is_refused_naming_why() -> None:
    found = _fed({0: 9, 1: 0}, {0: [(0, 4), (0, 5), (1, 3)]})
    problems = found.problems(trimmed=[0])
    assert len(problems) == 2
    assert "web partition 0: offset 9 is past what the job has read of it (up to 5)" in \
        problems[0] and "only goes back" in problems[0]
    assert "web partition 1: the copies of its offsets below 3 are no longer" in problems[1]
    assert "name 3 or above" in problems[1]
    # the next offset after what was read: nothing to read again, no problem
    assert _fed({0: 6}, {0: [(0, 4), (0, 5)]}).problems(trimmed=[0]) == []
    # nothing lost to retention: an offset below every copy is where the copies begin
    assert _fed({1: 0}, {0: [(1, 3)]}).problems() == []


def test_retention_in_one_internal_partition_is_judged_there_not_by_the_others() -> None:
    """Partition 1's copies begin at 0 in internal 0 (untrimmed) but at 7 in internal 1,
    whose oldest records retention removed: copies of offsets below 7 may be gone there."""
    found = _fed({1: 2}, {0: [(1, 0), (1, 1), (1, 2)], 1: [(1, 7), (1, 8)]})
    assert found.problems(trimmed=[1]) == [
        "web partition 1: the copies of its offsets below 7 are no longer all on the "
        "internal topic (its retention): name 7 or above"]
    assert found.problems(trimmed=[0]) == []  # internal 0's copies of 1 begin at 0
    # a trimmed internal partition holding no copy of it left cannot be judged: refused
    assert "internal partitions [2] lost their oldest records to retention and hold no " \
        "copy of it left" in found.problems(trimmed=[0, 2])[0]


def test_a_caught_up_partition_commits_its_stage_offset_again_once_an_hour() -> None:
    """Partition 0 has records to copy; 1 is caught up and committed by this driver a
    minute ago; 2 is caught up and never committed by it (a new driver); 3 is caught up,
    committed over an hour ago; 4 was never re-keyed. The broker expires an offset not
    committed for its retention: the caught-up ones are committed again, alone, each hour."""
    now = 10_000.0
    ends = {0: 50, 1: 40, 2: 30, 3: 20, 4: 10}
    done = {0: 45, 1: 40, 2: 30, 3: 20}
    refreshed = {1: now - 60, 3: now - REFRESH_S}
    assert stage_work([0, 1, 2, 3, 4], ends, done, refreshed, now) == [
        (0, 50, False), (2, 30, True), (3, 20, True), (4, 10, False)]


def test_a_stage_whose_offset_is_gone_finds_its_partitions_last_copy() -> None:
    copies = [([(SOURCE_HEADER, source_of("web", 0, 7))], b"a", 1),
              ([], b"b", 2),
              ([(SOURCE_HEADER, source_of("web", 1, 40))], b"c", 3),
              ([("other", b"x")], b"d", 4),
              ([(SOURCE_HEADER, source_of("web", 0, 9))], None, 5),
              ([(SOURCE_HEADER, source_of("web", 0, 8))], b"f", 6),
              ([(SOURCE_HEADER, b"nonsense")], b"g", 7),
              ([(SOURCE_HEADER, source_of("logs", 0, 99))], b"h", 8)]
    assert last_copy(copies, "web", 0) == (9, None, 5)  # the highest, a tombstone's copy
    assert last_copy(copies, "web", 1) == (40, b"c", 3)
    assert last_copy(copies, "web", 2) is None  # never copied: the reset rule decides


@pytest.mark.parametrize(("source", "expected"), [
    ([KafkaRecord(9, None, b"v", 5)], 10),  # the very record copied: resume after it
    ([KafkaRecord(9, None, b"other", 5)], None),  # another record there: a recreated topic
    ([KafkaRecord(9, None, b"v", 6)], None),
    ([], 10),  # nothing readable at that offset to compare with: after the copy
])
def test_a_gone_offset_is_rebuilt_only_from_copies_of_this_topics_records(
        monkeypatch: pytest.MonkeyPatch, source: list[KafkaRecord], expected: int | None
) -> None:
    """The copies name a source offset, not a topic incarnation: a recreated topic of that
    name holds other records there (or is shorter), and then the reset rule decides."""
    from kafka import TopicPartition

    from leakproof.kafka import rekey as stage

    cfg = load({"field": "session_id"})
    monkeypatch.setattr(stage, "_last_copy", lambda _cfg, _tp: (9, b"v", 5))
    monkeypatch.setattr(stage, "read_range", lambda _kafka, _rng: iter(source))
    tp = TopicPartition("logs", 0)
    assert stage._after_copies(cfg, tp, 0, 100) == expected
    assert stage._after_copies(cfg, tp, 0, 9) is None  # past the source's end: not its copy
    assert stage._after_copies(cfg, tp, 20, 100) == 10  # deleted there: on_data_loss judges


# ------------------------------------------- a re-keyed topic's dead letters re-driven


def rekeyed(offset: int, partition: int, source_partition: int) -> DeadLetter:
    """A dead letter of an internal topic: its record copied from ``source_partition``."""
    d = letter(offset, partition)
    return replace(d, headers=(*d.headers, (SOURCE_HEADER, source_of(
        "src", source_partition, 100 + offset))))


@pytest.mark.parametrize("point", [None, "redrive_after_mark", "redrive_before_commit",
                                   "redrive_after_commit"])
def test_a_rekeyed_topics_dead_letters_go_to_their_source_partitions_once(
        monkeypatch: pytest.MonkeyPatch, point: str | None) -> None:
    """Rows of internal partitions 0 and 1 whose records came crosswise from source
    partitions 0-2: each copy goes to its source partition (the stage re-keys it), without
    the internal topic's source header, once, through crashes. Left: a row naming no source
    record, one naming another topic, and one whose record the source no longer holds (a
    recreated source holds another there)."""
    letters = [rekeyed(o, p, (o + p) % 3) for p in (0, 1) for o in (3, 4, 8, 9, 12)]
    elsewhere = replace(letter(21, 1), headers=((SOURCE_HEADER, source_of("other", 0, 5)),))
    rows = FakeDeadLetterRows([*letters, letter(20, 1), elsewhere])
    broker = FakeBroker()
    gone = letters[-1]  # internal 1:12, from source 1:112
    lanes = Lanes("src", holds=lambda p, o, value, ts: (p, o) != (1, 112) and value is not None)
    assert count(rows, "t", ALL, lanes=lanes).by_partition == {0: 4, 1: 3, 2: 2}
    assert sorted(lanes.left.values()) == [1, 2]
    if point is not None:
        with pytest.raises(Crash):
            attempt(rows, broker, crasher(point, 2), monkeypatch, lanes=lanes)
    attempt(rows, broker, crasher(None), monkeypatch, lanes=lanes)
    sent = [d for d in letters if d is not gone]
    assert copies(broker) == Counter({d.origin: 1 for d in sent})
    for d in sent:
        got = rows.rows[("t", d.partition, d.offset)]
        assert got.mark is not None and got.mark.state == SENT
        source = source_header(d.headers)
        assert source is not None
        rec = broker.logs[source[1]][got.mark.copy_offset]
        assert (rec.key, rec.value) == (d.key, d.value)
        assert rec.headers == (("trace", b"\x01"), (ORIGIN_HEADER, d.origin.encode()))
    for left in (gone, letter(20, 1), elsewhere):
        assert rows.rows[("t", left.partition, left.offset)].mark is None  # never sent


def test_a_stage_task_rides_out_kafka_away_then_gives_up(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A broker restarting under a batch: the task tries again (each try fences the last),
    backing off, until the outage bound has passed since its first try."""
    from kafka.errors import KafkaTimeoutError

    from leakproof.kafka import rekey as kafka_rekey

    tries: list[int] = []

    def flaky(*_args: Any) -> RekeyReport:
        tries.append(1)
        if len(tries) < 3:
            raise KafkaTimeoutError("Unable to bootstrap from ['127.0.0.1:9092']")
        return RekeyReport(0, 10, 20, 10)

    monkeypatch.setattr(kafka_rekey, "rekey_partition", flaky)
    slept: list[float] = []
    cfg = load({"field": "session_id"})
    got = kafka_rekey.rekey_riding_outages(cfg, 0, 20, 4, None, sleep=slept.append)
    assert (got.until_offset, len(tries), slept) == (20, 3, [0.5, 1.0])
    tries.clear()
    with pytest.raises(KafkaTimeoutError):
        kafka_rekey.rekey_riding_outages(cfg, 0, 20, 4, None, outage_s=0, sleep=slept.append)
    assert len(tries) == 1


def test_a_stage_task_fenced_or_refused_ends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fence (a newer attempt of the partition holds the id: a retry would fence it back)
    or a refusal no retry mends ends the task at the first try, also when it comes wrapped
    in the stage's own error."""
    from kafka.errors import ProducerFencedError, TopicAuthorizationFailedError

    from leakproof.core.errors import PublishError
    from leakproof.kafka import rekey as kafka_rekey

    def wrapped(cause: Exception) -> PublishError:
        try:
            raise PublishError("re-keying t partition 0: the transaction failed") from cause
        except PublishError as exc:
            return exc

    cfg = load({"field": "session_id"})
    for error in (ProducerFencedError(), wrapped(ProducerFencedError()),
                  wrapped(TopicAuthorizationFailedError())):
        tries: list[int] = []

        def refused(*_args: Any, error: Exception = error,
                    tries: list[int] = tries) -> RekeyReport:
            tries.append(1)
            raise error

        monkeypatch.setattr(kafka_rekey, "rekey_partition", refused)
        with pytest.raises(type(error)):
            kafka_rekey.rekey_riding_outages(cfg, 0, 20, 4, None, sleep=lambda _s: None)
        assert tries == [1], error


def test_a_retry_after_a_lost_commit_answer_copies_nothing_more(monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """A try whose commit landed but whose answer was lost: the retry starts where that
    commit put the offset, is held to the slice that try took (not the next one, past the
    batch's rate cap), and the task reports that try's copies."""
    from kafka.errors import KafkaTimeoutError

    from leakproof.kafka import rekey as kafka_rekey

    committed = [10]  # the stage's offset on the broker
    asked: list[int] = []

    def lost_answer(_cfg: Any, partition: int, readable_end: int, _parts: int,
                    budget: int | None, _refresh: bool,
                    committing: Callable[[RekeyReport], None]) -> RekeyReport:
        asked.append(readable_end)
        start = committed[0]
        until = min(readable_end, start + (budget or 10**9))
        if until == start:
            return RekeyReport(partition, start, start, committed=False)
        committing(RekeyReport(partition, start, until, until - start, 1))
        committed[0] = until  # it landed ...
        if len(asked) == 1:
            raise KafkaTimeoutError("commit_transaction: no answer")  # ... unheard
        return RekeyReport(partition, start, until, until - start)

    monkeypatch.setattr(kafka_rekey, "rekey_partition", lost_answer)
    cfg = load({"field": "session_id"})
    got = kafka_rekey.rekey_riding_outages(cfg, 0, 100, 4, 30, sleep=lambda _s: None)
    assert asked == [100, 40]  # the retry held to the first try's slice
    assert (got.from_offset, got.until_offset, got.records, got.forwarded) == (10, 40, 30, 1)
    assert committed == [40]  # one slice this batch, not two
