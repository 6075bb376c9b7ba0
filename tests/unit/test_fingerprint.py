"""The model's meaning kept beside the rows: what counts as a change, and the refusal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from leakproof.driver.startup import check_model
from leakproof.errors import ConfigError
from leakproof.model.fingerprint import changes, meaning, only_added
from leakproof.model.spec import Aggregate, web_model
from leakproof.testing import FakeLeaseStore

WEB = web_model()


def with_aggregates(*aggs: Aggregate) -> str:
    return meaning(replace(WEB, aggregates=aggs))


BASE = (Aggregate("events", "count"), Aggregate("bytes", "sum", "bytes"))


def test_the_schema_file_and_format_are_not_meaning() -> None:
    assert meaning(replace(WEB, schema_file=str(Path("/elsewhere.avsc")))) == meaning(WEB)
    assert meaning(replace(WEB, format="confluent")) == meaning(WEB)


def test_each_kind_of_change_is_named() -> None:
    found = changes(with_aggregates(*BASE), with_aggregates(
        Aggregate("events", "count", where="status >= 500"), Aggregate("clicks", "count")))
    assert [str(c) for c in found] == [
        "aggregate bytes removed (was fn: sum, field: bytes)",
        "aggregate clicks added (fn: count)",
        "aggregate events changed from fn: count to fn: count, where: status >= 500"]
    assert not only_added(found)
    seq = changes(meaning(WEB), meaning(replace(WEB, sequence=None)))
    assert [str(c) for c in seq] == ["sequence changed from seq to none"]


def test_an_added_aggregate_alone_is_a_safe_change() -> None:
    found = changes(with_aggregates(*BASE), with_aggregates(*BASE, Aggregate("n", "count")))
    assert only_added(found) and len(found) == 1


def test_the_first_start_records_the_model_and_a_changed_one_is_refused() -> None:
    leases = FakeLeaseStore()
    check_model(leases, with_aggregates(*BASE))
    assert leases.model_meaning == with_aggregates(*BASE)
    check_model(leases, with_aggregates(*BASE))  # the same: nothing to say
    with pytest.raises(ConfigError, match=r"aggregate bytes changed from fn: sum, field: "
                                          r"bytes to fn: max.*hbase\.table_prefix.*--force"):
        check_model(leases, with_aggregates(BASE[0], Aggregate("bytes", "max", "bytes")))
    with pytest.raises(ConfigError, match=r"aggregate n added.*leakproof model accept"):
        check_model(leases, with_aggregates(*BASE, Aggregate("n", "count")))
