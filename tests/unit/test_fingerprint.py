"""The model's meaning kept beside the rows: what counts as a change, and the refusal."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from leakproof.commands.model_accept import judge
from leakproof.core.config import SessionsConfig
from leakproof.core.errors import ConfigError
from leakproof.core.events import Event
from leakproof.core.gap_fold import GapRule
from leakproof.core.offsets import OffsetRange
from leakproof.driver.startup import check_model
from leakproof.model.compiled import compile_model
from leakproof.model.fingerprint import beyond_force, changes, meaning, only_added
from leakproof.model.spec import Aggregate, Model, web_model
from leakproof.task.process import Rules, Stores, TaskBatch, process_ranges
from leakproof.testing.driver_ports import FakeLeaseStore
from leakproof.testing.hbase_table import Journal
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
    FakeVisits,
)

from .test_oracle_gap import PLAIN, SEQUENCED
from .test_oracle_gap import ev as access_event
from .test_process_range import Rec

WEB = web_model()
BY_ID = SessionsConfig()
BY_GAP = SessionsConfig(by="gap")


def web(model: Model = WEB, sessions: SessionsConfig = BY_ID) -> str:
    return meaning(model, sessions)


def with_aggregates(*aggs: Aggregate) -> str:
    return web(replace(WEB, aggregates=aggs))


BASE = (Aggregate("events", "count"), Aggregate("bytes", "sum", "bytes"))


def test_the_schema_file_and_format_are_not_meaning() -> None:
    assert web(replace(WEB, schema_file=str(Path("/elsewhere.avsc")))) == web()
    assert web(replace(WEB, format="confluent")) == web()


def test_each_kind_of_change_is_named() -> None:
    found = changes(with_aggregates(*BASE), with_aggregates(
        Aggregate("events", "count", where="status >= 500"), Aggregate("clicks", "count")))
    assert [str(c) for c in found] == [
        "aggregates.bytes removed (was fn: sum, field: bytes)",
        "aggregates.clicks added (fn: count)",
        "aggregates.events changed from fn: count to fn: count, where: status >= 500"]
    assert not only_added(found)
    seq = changes(web(), web(replace(WEB, sequence=None)))
    assert [str(c) for c in seq] == ["events.sequence changed from seq to none"]


def test_an_added_aggregate_alone_is_a_safe_change() -> None:
    found = changes(with_aggregates(*BASE), with_aggregates(*BASE, Aggregate("n", "count")))
    assert only_added(found) and len(found) == 1


def test_the_first_start_records_the_model_and_a_changed_one_is_refused() -> None:
    leases = FakeLeaseStore()
    check_model(leases, with_aggregates(*BASE))
    assert leases.model_meaning == with_aggregates(*BASE)
    check_model(leases, with_aggregates(*BASE))  # the same: nothing to say
    with pytest.raises(ConfigError, match=r"aggregates\.bytes changed from fn: sum, field: "
                                          r"bytes to fn: max.*hbase\.table_prefix.*"
                                          r"sessions diff.*accept --force` cannot take it"):
        check_model(leases, with_aggregates(BASE[0], Aggregate("bytes", "max", "bytes")))
    with pytest.raises(ConfigError, match=r"aggregates\.n added.*leakproof model accept"):
        check_model(leases, with_aggregates(*BASE, Aggregate("n", "count")))
    with pytest.raises(ConfigError, match=r"aggregates\.bytes changed from fn: sum, field: "
                                          r"bytes to fn: sum, field: bytes, where: status "
                                          r">= 500.*`leakproof model accept --force`"):
        check_model(leases, with_aggregates(BASE[0], Aggregate("bytes", "sum", "bytes",
                                                               "status >= 500")))


@pytest.mark.parametrize(("sessions", "said"), [
    (SessionsConfig(by="gap"), "sessions.by changed from id to gap"),
    (SessionsConfig(late="fold"), "sessions.late changed from count to fold"),
])
def test_each_session_setting_that_says_what_a_row_is_is_refused_by_name(
        sessions: SessionsConfig, said: str) -> None:
    leases = FakeLeaseStore()
    check_model(leases, web())
    with pytest.raises(ConfigError, match=re.escape(said)):
        check_model(leases, web(sessions=sessions))


@pytest.mark.parametrize(("sessions", "said"), [
    (SessionsConfig(by="gap", inactivity_gap_s=600),
     "sessions.inactivity_gap_s changed from 1800 to 600"),
    (SessionsConfig(by="gap", max_duration_s=7200),
     "sessions.max_duration_s changed from none to 7200"),
    (SessionsConfig(by="gap", late="fold"), "sessions.late changed from count to fold"),
    (SessionsConfig(by="id"), "sessions.by changed from gap to id"),
])
def test_split_by_the_gap_the_gap_and_the_longest_session_are_meaning_too(
        sessions: SessionsConfig, said: str) -> None:
    leases = FakeLeaseStore()
    check_model(leases, web(sessions=BY_GAP))
    with pytest.raises(ConfigError, match=re.escape(said) + ".*hbase.table_prefix"):
        check_model(leases, web(sessions=sessions))


def test_settings_that_only_say_when_a_row_is_final_are_not_meaning() -> None:
    """grace and idle_after only move when a session closes; by id, so does the gap (a
    session is every event of its id whatever the gap)."""
    leases = FakeLeaseStore()
    check_model(leases, web())
    check_model(leases, web(sessions=SessionsConfig(inactivity_gap_s=60, grace_s=5,
                                                    idle_after_s=None)))
    check_model(leases, web(sessions=SessionsConfig(idle_after_s=30)))
    gap = FakeLeaseStore()
    check_model(gap, web(sessions=BY_GAP))
    check_model(gap, web(sessions=SessionsConfig(by="gap", grace_s=1, idle_after_s=5)))


def test_a_meaning_recorded_before_the_session_settings_is_read_as_the_configured_ones() -> None:
    """A job upgraded in place over rows of the same model is not refused for its session
    settings, whatever they are; the complete meaning is recorded at that start and
    checked from then on."""
    leases = FakeLeaseStore()
    older = json.dumps({k: v for k, v in json.loads(web()).items() if k != "sessions"})
    leases.model_meaning = older
    gap = web(sessions=SessionsConfig(by="gap", inactivity_gap_s=60, late="fold"))
    check_model(leases, gap)
    assert leases.model_meaning == gap
    with pytest.raises(ConfigError, match=r"sessions\.inactivity_gap_s changed from 60 to 90"):
        check_model(leases, web(sessions=SessionsConfig(by="gap", inactivity_gap_s=90,
                                                        late="fold")))
    leases.model_meaning = older  # a model change is still caught from an older record
    with pytest.raises(ConfigError, match=r"events\.sequence changed from seq to none"):
        check_model(leases, web(replace(WEB, sequence=None)))


def test_force_takes_a_change_the_rows_survive_and_refuses_the_others_naming_the_way_out(
        ) -> None:
    where = with_aggregates(BASE[0], Aggregate("bytes", "sum", "bytes", "status >= 500"))
    assert [c.what for c in judge(with_aggregates(*BASE), where, force=True)] == [
        "aggregates.bytes"]
    assert judge(web(), web(replace(WEB, sequence=None)), force=True)  # by id: it may go
    assert judge(web(), web(sessions=SessionsConfig(late="fold")), force=True)
    with pytest.raises(ConfigError, match=r"not recorded: sessions\.late.*--force records"):
        judge(web(), web(sessions=SessionsConfig(late="fold")), force=False)
    refused = [
        (web(sessions=BY_GAP), web(replace(WEB, sequence=None), BY_GAP),
         r"events\.sequence changed from seq to none: with sessions\.by: gap"),
        (web(), web(sessions=BY_GAP), r"sessions\.by changed from id to gap: a row's key"),
        (with_aggregates(*BASE), with_aggregates(BASE[0], Aggregate("bytes", "max", "bytes")),
         r"aggregates\.bytes changed .*Give the new definition a new name"),
        (with_aggregates(*BASE), with_aggregates(BASE[0], Aggregate("bytes", "sum", "status")),
         r"aggregates\.bytes changed"),
    ]
    for recorded, configured, why in refused:
        with pytest.raises(ConfigError, match="not recorded, even with --force: " + why +
                           r".*hbase\.table_prefix.*leakproof sessions diff"):
            judge(recorded, configured, force=True)
        with pytest.raises(ConfigError, match=r"--force cannot take it"):
            judge(recorded, configured, force=False)
    assert beyond_force(changes(web(), web(sessions=BY_GAP)), web(sessions=BY_GAP))


# --------------------------------------------------------------------- what rows survive

GAP_MS = 1_000


@dataclass
class Table:
    """One partition's rows over the fakes of the real stores, folded on under whatever
    model and settings each range is given: the job before and after a recorded change."""

    journal: Journal = field(default_factory=Journal)
    sent: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = FakeSessionRows(self.journal)
        self.partitions = FakePartitionRows(self.journal)
        self.visits = FakeVisits(self.journal, self.partitions)

    def fold(self, model: Model, sessions: SessionsConfig, at: int) -> None:
        """Two visits of three events each from ``at`` on, in one range."""
        seq = model.sequence is not None
        first = len(self.sent)
        events = [access_event(v, at + i * 100, f"/{v}{i}", n=first + i, code=200 + i,
                               sequenced=seq) for v in ("a", "b") for i in range(3)]
        self.sent += events
        gap = sessions.by == "gap"
        compiled = compile_model(model, by_time=gap)
        self.rows = FakeSessionRows(self.journal, self.rows.table, model=compiled)
        stores = Stores(self.rows, self.partitions, FakeDeadLetters(self.journal),
                        FakeLeaseCheck(self.journal, held_by=1), None,
                        self.visits if gap else None)
        recs = [Rec(first + i, e.session_id.encode(), str(first + i).encode(), -1)
                for i, e in enumerate(events)]
        process_ranges([(OffsetRange("t", 0, first, first + len(recs)), recs)],
                       lambda key, value, **_: self.sent[int(value or b"0")], stores,
                       compiled,
                       Rules(sessions.close_after_ms, fold_late=sessions.late == "fold",
                             gap=GapRule(sessions.gap_ms, sessions.max_duration_ms)
                             if gap else None),
                       TaskBatch(first + 1, 1, {0: first + 1}))


def _agg(model: Model, name: str, **changed: Any) -> Model:
    return replace(model, aggregates=tuple(replace(a, **changed) if a.name == name else a
                                           for a in model.aggregates))


def _changes_to_try() -> list[tuple[str, Model, SessionsConfig, Model, SessionsConfig]]:
    """Every kind of recorded change, from either kind of model, under either rule."""
    out = []
    for by in ("id", "gap"):
        s = SessionsConfig(by=by, inactivity_gap_s=1.0, grace_s=0.5)
        for m, name in ((PLAIN, "plain"), (SEQUENCED, "sequenced")):
            other = SEQUENCED if m is PLAIN else PLAIN
            out += [(f"{by}/{name}: the sequence {'added' if m is PLAIN else 'removed'}",
                     m, s, other, s),
                    (f"{by}/{name}: a where changed", m, s,
                     _agg(m, "hits", where="code >= 201"), s),
                    (f"{by}/{name}: an aggregate added and one removed", m, s,
                     replace(m, aggregates=(*m.aggregates[1:], Aggregate("n", "count"))), s),
                    (f"{by}/{name}: late", m, s, m, replace(s, late="fold")),
                    (f"{by}/{name}: the key counted by", m, s, m,
                     replace(s, by="gap" if by == "id" else "id")),
                    *((f"{by}/{name}: {fn} of {fld} instead", m, s, _agg(m, agg, fn=fn,
                                                                      field=fld), s)
                      for agg, fn, fld in (("landing", "count", None),
                                           ("landing", "first", "code"),
                                           ("hits", "last", "path"), ("low", "last", "code"),
                                           ("size", "max", "size")))]
            if by == "gap":
                out += [(f"gap/{name}: the gap", m, s, m, replace(s, inactivity_gap_s=0.2)),
                        (f"gap/{name}: the longest session", m, s, m,
                         replace(s, max_duration_s=0.15))]
    return out


@pytest.mark.parametrize("case", _changes_to_try(), ids=lambda c: c[0])
def test_force_records_only_changes_the_stored_rows_can_be_folded_on_from(
        case: tuple[str, Model, SessionsConfig, Model, SessionsConfig]) -> None:
    """Rows written under one meaning, then folded on under another: every change that
    ``model accept --force`` records folds on without an error (a poison batch would fail
    again on each retry and restart); the ones it refuses are refused by name."""
    _, before, old, after, new = case
    table = Table()
    table.fold(before, old, 0)
    stuck = beyond_force(changes(meaning(before, old), meaning(after, new)),
                         meaning(after, new))
    if stuck:  # refused: named, with the way out
        with pytest.raises(ConfigError, match=r"sessions diff"):
            judge(meaning(before, old), meaning(after, new), force=True)
        return
    judge(meaning(before, old), meaning(after, new), force=True)
    table.fold(after, new, 400)  # the open sessions go on
    table.fold(after, new, 10_000)  # and close


def test_the_changes_force_refuses_would_each_fail_every_batch() -> None:
    """Why they are refused: folded on anyway, the rows break the fold."""
    s = SessionsConfig(by="gap", inactivity_gap_s=1.0, grace_s=0.5)
    for before, after, error in ((SEQUENCED, PLAIN, TypeError),
                                 (PLAIN, _agg(PLAIN, "landing", fn="count", field=None),
                                  ValueError),
                                 (PLAIN, _agg(PLAIN, "hits", fn="last", field="path"),
                                  TypeError)):
        table = Table()
        table.fold(before, s, 0)
        assert beyond_force(changes(meaning(before, s), meaning(after, s)),
                            meaning(after, s))
        with pytest.raises(error):
            table.fold(after, s, 400)
