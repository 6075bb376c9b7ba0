"""The local stack script's pure decisions, with literal log lines."""

from __future__ import annotations

from stack import registry_lacks_tables

STARTED = ("2026-11-26 01:26:51 INFO apicurio-registry-app 2.6.13.Final on JVM started in "
           "5.583s. Listening on: http://127.0.0.1:8081\n")
MISSING = ('Caused by: org.h2.jdbc.JdbcSQLSyntaxErrorException: Table "CONFIG" not found; '
           "SQL statement:\n")


def test_a_registry_whose_database_lacks_its_tables_is_told_apart() -> None:
    assert registry_lacks_tables(500, STARTED + MISSING)


def test_other_answers_and_older_starts_are_waited_on() -> None:
    assert not registry_lacks_tables(503, STARTED + MISSING)  # still starting
    assert not registry_lacks_tables(500, STARTED)  # another failure: wait and see
    # the missing table was an earlier start's; this start has not said anything yet
    assert not registry_lacks_tables(500, STARTED + MISSING + STARTED)
