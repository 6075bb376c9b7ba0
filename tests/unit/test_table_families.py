"""What the job asks of its tables' families, and the shell command for a table without it."""

from __future__ import annotations

import pytest
from thriftpy2.thrift import TException
from thriftpy2.transport import TTransportException

from leakproof.core import config
from leakproof.hbase.connection import (
    SESSIONS_FAMILIES,
    STATE_FAMILIES,
    family_advice,
    untuned_tables,
)


def test_every_read_family_asks_for_a_row_bloom_filter_and_the_block_cache() -> None:
    # Thrift1 sends its IDL's defaults for what is left out: no Bloom filter, no block cache
    for options in (*SESSIONS_FAMILIES.values(), *STATE_FAMILIES.values()):
        assert options["bloom_filter_type"] == "ROW"
        assert options["block_cache_enabled"] is True
        assert options["max_versions"] == 1


def test_a_table_with_what_the_job_asks_for_needs_no_advice() -> None:
    tuned = {b"s:": {"bloom_filter_type": b"ROW", "block_cache_enabled": True},
             b"f:": {"bloom_filter_type": b"ROWCOL", "block_cache_enabled": True}}
    assert family_advice("t1_web_sessions", tuned) is None


def test_the_advice_names_the_table_and_only_the_families_that_lack_it() -> None:
    found = {b"s:": {"bloom_filter_type": b"NONE", "block_cache_enabled": True},
             b"f:": {"bloom_filter_type": b"ROW", "block_cache_enabled": False},
             b"x:": {"bloom_filter_type": b"ROW", "block_cache_enabled": True}}
    assert family_advice("t1_web_sessions", found) == (
        "alter 't1_web_sessions', "
        "{NAME => 'f', BLOOMFILTER => 'ROW', BLOCKCACHE => 'true'}, "
        "{NAME => 's', BLOOMFILTER => 'ROW', BLOCKCACHE => 'true'}")


class _Tables:
    """A connection whose tables answer ``families()`` from a dict, or raise."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers

    def table(self, name: str) -> _Tables:
        self.asked = name
        return self

    def families(self) -> object:
        answer = self.answers[self.asked]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_table_whose_settings_cannot_be_read_is_passed_over_not_fatal() -> None:
    cfg = config.HBaseConfig(table_prefix="t1")
    old = {b"s:": {"bloom_filter_type": b"NONE", "block_cache_enabled": False}}
    conn = _Tables({cfg.sessions_table: old,
                    cfg.state_table: TException("AccessDeniedException: no CREATE")})
    assert untuned_tables(conn, cfg) == [
        "alter 't1_web_sessions', {NAME => 's', BLOOMFILTER => 'ROW', BLOCKCACHE => 'true'}"]


def test_a_lost_connection_while_reading_them_is_the_callers_to_retry() -> None:
    cfg = config.HBaseConfig()
    conn = _Tables({cfg.sessions_table: TTransportException(message="reset")})
    with pytest.raises(TTransportException):
        untuned_tables(conn, cfg)


def test_a_family_ttl_is_refused_naming_the_alter_that_removes_it() -> None:
    from leakproof.hbase.connection import FOREVER, ttl_refusal

    assert ttl_refusal("t1_web_sessions", {b"s:": {"time_to_live": FOREVER},
                                           b"f:": {"time_to_live": -1}}) is None
    refusal = ttl_refusal("t1_web_sessions", {b"s:": {"time_to_live": 40},
                                              b"f:": {"time_to_live": FOREVER}})
    assert refusal is not None
    assert "(s 40s)" in refusal
    assert refusal.endswith("alter 't1_web_sessions', {NAME => 's', TTL => 'FOREVER'}")
