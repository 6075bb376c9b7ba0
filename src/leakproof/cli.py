"""``leakproof``: argument parsing, and one thin function per command that calls the library
and prints its answer. Each imports (and connects to) only what its command uses.

A command's options are declared just above its function, and ``COMMANDS`` (at the end)
lists each command once: its name, its help, its options, its function. ``build_parser``
and ``main`` only walk that table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from leakproof.core import config as config_mod
from leakproof.core.dead_letter import Selection
from leakproof.core.errors import ConfigError, LeakproofError
from leakproof.core.logs import configure, fail
from leakproof.kafka.registry import resolve_schema
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec


def _spec(text: str) -> GeneratorSpec:
    try:
        seed, events, sessions, *rest = (int(x) for x in text.split(":"))
        if len(rest) > 2:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not SEED:EVENTS:SESSIONS[:START_TS[:SPAN_S]]") from None
    start_ts = rest[0] if rest else DEFAULT_START_TS
    return GeneratorSpec(seed, events, sessions, start_ts,
                         span_s=rest[1] if len(rest) > 1 else None)


def _iso_ms(text: str, zone_needed: bool = False) -> int:
    """An ISO 8601 time as epoch ms; without a zone UTC, or refused (``zone_needed``)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        if zone_needed:
            raise argparse.ArgumentTypeError(f"{text!r} has no zone: add one (Z, +01:00, ...)")
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _zoned_ms(text: str) -> int:
    """An ISO 8601 time that says its zone: a backfill's end is no place to guess one."""
    return _iso_ms(text, zone_needed=True)


def _count(text: str) -> int:
    """A whole number, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _offsets(text: str) -> dict[int, int]:
    from leakproof.commands.rewind import parse_offsets

    try:
        return parse_offsets(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


DESCRIPTION = ("leakproof: Kafka web-server events folded into per-session rows in HBase, "
               "exactly once, by a Spark Streaming job; offsets in HBase. Each command "
               "takes --config config.yml.")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CONFIG_HELP = "path to config.yml"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("leakproof")
    except PackageNotFoundError:  # a source tree on the path, not installed
        return "unknown"


@dataclass(frozen=True)
class Command:
    """One command, or one action of a command with actions (``offsets rewind``): its
    options beside the function that runs it. They sit in this module, not in
    ``commands/``: those import kafka and happybase, which ``--help`` should not wait for."""

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]  # adds the options besides --config
    run: Callable[[argparse.Namespace, config_mod.Config], int]
    reads_events: bool = False  # its reader schema may live in the registry


@dataclass(frozen=True)
class WithActions:
    """A command whose actions are sub-commands (``offsets show``, ``offsets rewind``)."""

    name: str
    help: str
    actions: tuple[Command, ...]
    reads_events: bool = False


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command in ``COMMANDS``, each taking ``--config``."""
    parser = argparse.ArgumentParser(prog="leakproof", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"leakproof {_version()}")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                        metavar="LEVEL", help=f"one of {', '.join(LOG_LEVELS)} (default INFO)")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                                help="what to do (leakproof COMMAND --help for its options)")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        if isinstance(command, Command):
            p.add_argument("--config", required=True, help=CONFIG_HELP)
            command.options(p)
            continue
        # --config before or after the action: each parser takes it, and SUPPRESS keeps
        # the action's parser from resetting what the command's parser read (``main``
        # checks it was given)
        p.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
        actions = p.add_subparsers(dest="action", required=True)
        for action in command.actions:
            a = actions.add_parser(action.name, help=action.help)
            a.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
            action.options(a)
    return parser


def _chosen(args: argparse.Namespace) -> tuple[Command | WithActions, Command]:
    """The command the parsed ``args`` name, and the entry that runs it (its action's, if
    it has actions)."""
    command = next(c for c in COMMANDS if c.name == args.cmd)
    if isinstance(command, Command):
        return command, command
    return command, next(a for a in command.actions if a.name == args.action)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "config", None) is None:
        parser.error("the following arguments are required: --config")
    log_format = getattr(args, "log_format", "text")
    configure(args.log_level, log_format)
    command, runs = _chosen(args)
    try:
        cfg = config_mod.load(args.config)
        if command.reads_events:  # the reader schema may live in the registry
            cfg = resolve_schema(cfg)
        return runs.run(args, cfg)
    except ConfigError as exc:
        fail(f"leakproof: config error: {exc}", log_format)
        return 2
    except LeakproofError as exc:
        fail(f"leakproof: {exc}", log_format)
        return 1


def _secured_services(cfg: config_mod.Config) -> str:
    """What the job logs in for, as an error at start names it."""
    names = [cfg.hbase.kerberos_service()] if cfg.hbase.auth == "kerberos" else []
    if cfg.kafka.uses_gssapi:
        names.append(f"Kafka at {cfg.kafka.bootstrap_servers}")
    return " and ".join(names) or "a secured service"


# -- the commands: each its options, then one call into the library and what it prints ---


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--until-idle", type=float, metavar="S",
                   help="stop gracefully once the batches planned for S seconds found no "
                        "new records (counted from the first that looked)")
    p.add_argument("--max-batches", type=int, metavar="N", help="stop after N batches")
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--until-offsets", type=_offsets, metavar="P=O[,P=O...]",
                       help="a backfill: read every partition up to (not including) its "
                            "offset here, then stop (exit 0); name every partition")
    bound.add_argument("--until-time", type=_zoned_ms, metavar="ISO8601",
                       help="a backfill: records whose Kafka timestamp is at or after this "
                            "time (with its zone, e.g. 2026-01-01T00:00:00Z) are not read; "
                            "stop once every partition got there (exit 0)")
    p.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="every log record as a text line, or as one JSON object (the "
                        "per-batch progress record's figures as its fields)")


def run(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.driver.job import Job, RunLimits
    from leakproof.driver.spark_session import spark_context

    if cfg.kerberos is not None:  # a bad login stops the run before any JVM starts
        from leakproof.security.kerberos import login

        login(cfg.kerberos, _secured_services(cfg))
    if cfg.input.registry is not None:  # refused credentials stop the run before Spark
        from leakproof.kafka.registry import client

        client(cfg.input.registry).check_at_start()
    spark_context(cfg)
    return Job(cfg, RunLimits(args.until_idle, args.max_batches, args.log_format,
                              args.until_offsets, args.until_time)).run()


def _stop_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, metavar="S",
                   help="wait up to S seconds until it has stopped, and say where")


def stop(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.stop import ask_to_stop

    return ask_to_stop(cfg, args.wait)


def _produce_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, required=True, help="how many events")
    p.add_argument("--sessions", type=int, required=True,
                   help="over how many sessions (at most --events)")
    p.add_argument("--seed", type=int, required=True,
                   help="the generator's seed: the same seed, the same events")
    p.add_argument("--rate", type=float, help="events per second (default: unthrottled)")
    p.add_argument("--span-s", type=int,
                   help="event time over which sessions start (default: 2 s per session)")
    p.add_argument("--start-ts", type=int, default=DEFAULT_START_TS,
                   help="event time of the first session, epoch ms")
    p.add_argument("--format", choices=["avro", "confluent"], default="avro",
                   help="plain schemaless Avro, or registry-framed (the Confluent wire "
                        "format; the schema registered at events.registry.url)")


def produce(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.produce import send_confluent, send_events
    from leakproof.testing.generator import generate

    spec = GeneratorSpec(args.seed, args.events, args.sessions, args.start_ts, span_s=args.span_s)
    events = generate(spec)

    def progress(sent: int, seconds: float) -> None:
        print(f"produce: {sent} of {len(events)} events sent ({100 * sent / len(events):.0f}%)"
              f" in {seconds:.0f}s, {sent / seconds:.0f} ev/s", file=sys.stderr, flush=True)

    if args.format == "confluent":
        if cfg.input.registry is None:
            raise ConfigError("produce --format confluent needs 'events.registry.url' (with "
                              "'events.format: confluent')")
        report = send_confluent(cfg.kafka, cfg.kafka.topic, events, cfg.input.registry,
                                args.rate, progress)
    else:
        report = send_events(cfg.kafka, cfg.kafka.topic, events, args.rate, progress)
    print(f"produced {report.records} events ({spec.sessions} sessions, seed {spec.seed}) "
          f"to {cfg.kafka.topic} in {report.seconds:.1f}s ({report.rate:.0f} ev/s)")
    return 0


def _topic_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["create"], help="create it (if it does not exist)")
    p.add_argument("--partitions", type=int, required=True, help="how many partitions")
    p.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                   help="copies of each partition (default: the brokers' "
                        "default.replication.factor)")


def topic(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.kafka.admin import create_topic

    made = create_topic(cfg.kafka, cfg.kafka.topic, args.partitions,
                        replication_factor=args.replication_factor)
    print(f"topic {cfg.kafka.topic}: {'created' if made else 'exists'}")
    return 0


def _tables_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["create"], help="create the missing ones")


def tables(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.hbase.connection import connect, ensure_tables, untuned_tables

    conn = connect(cfg.hbase)
    try:
        created = ensure_tables(conn, cfg.hbase)
        advice = untuned_tables(conn, cfg.hbase)
    finally:
        conn.close()
    print(f"tables created: {', '.join(created) or 'none (all exist)'}")
    for command in advice:
        print(f"without a Bloom filter or block cache; in the HBase shell: {command}")
    return 0


OLD_LIMIT = "accepted for scripts written for earlier versions; no effect"


def _offsets_show_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, metavar="N", help=OLD_LIMIT)


def _offsets_history_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=20, metavar="N", help="how many (default 20)")


def offsets_history(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commit_stores import open_store
    from leakproof.core.errors import TableMissing

    store = open_store(cfg)
    try:
        rows = store.history(1 if args.action == "show" else args.limit)
    except TableMissing as exc:  # before the job's first run, or a mistyped prefix
        print(f"no committed offsets for {cfg.kafka.topic}:{cfg.kafka.group_id}: {exc}")
        return 1
    finally:
        store.close()
    if not rows:
        print(f"no committed offsets for {cfg.kafka.topic}:{cfg.kafka.group_id}")
        return 1
    for row in rows:
        print(json.dumps({"batch_ms": row.batch_ms, "offsets": row.offsets,
                          "audit": row.audit}, sort_keys=True))
    return 0


def _offsets_lag_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, metavar="N", help=OLD_LIMIT)
    p.add_argument("--json", action="store_true",
                   help="one JSON object instead of the table (for scripts)")


def offsets_lag(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.lag import lag, lag_table

    behind = lag(cfg)
    print(json.dumps(behind, sort_keys=True) if args.json else lag_table(behind))
    return 0 if behind["committed_ms"] is not None else 1


def _offsets_rewind_options(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-batch", type=int, metavar="BATCH_MS",
                       help="the offsets of this earlier commit")
    where.add_argument("--to-time", type=_iso_ms, metavar="ISO8601",
                       help="the first records at or after this Kafka record time "
                            "(no zone = UTC)")
    where.add_argument("--to-offsets", type=_offsets, metavar="P=O[,P=O...]",
                       help="these partitions to these offsets, the rest as they are (with "
                            "input.rekey: the internal topic's)")
    where.add_argument("--to-source-offsets", type=_offsets, metavar="P=O[,P=O...]",
                       help="input.rekey: read these source partitions again from these "
                            "offsets, through their copies on the internal topic")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (per partition: from, to, offsets read again) "
                        "and change nothing")


def offsets_rewind(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.rewind import RewindTarget, rewind

    target = RewindTarget(args.to_batch, args.to_time, args.to_offsets,
                          args.to_source_offsets)
    batch_ms, plan = rewind(cfg, target, dry_run=args.dry_run)
    if args.dry_run:
        print("\n".join([*plan.table(), "dry run: nothing written"]))
    print(json.dumps(plan.summary(batch_ms), sort_keys=True))
    return 0


def _sessions_get_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("session_id", help="the row key: the session's id")


def sessions_get(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.hbase.connection import connect
    from leakproof.hbase.session_store import readable_row

    conn = connect(cfg.hbase)
    try:
        got = readable_row(conn.table(cfg.hbase.sessions_table), args.session_id)
    finally:
        conn.close()
    if got is None:
        print(f"no session {args.session_id}", file=sys.stderr)
        return 1
    print(json.dumps(got, indent=2, sort_keys=True))
    return 0


def _sessions_diff_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--against", required=True, metavar="CONFIG",
                   help="the config.yml of the other table set (B; --config is A)")
    p.add_argument("--sample", type=_count, default=10, metavar="N",
                   help="print up to N rows of each kind of difference (default 10)")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")


def sessions_diff(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.sessions_diff import diff_sessions

    found = diff_sessions(cfg, config_mod.load(args.against), args.sample)
    print(json.dumps(found.as_json(), sort_keys=True) if args.json else
          "\n".join(found.lines()))
    return 0 if found.rows.same else 1


def _letter_filters(p: argparse.ArgumentParser) -> None:
    """Which dead letters a ``deadletters`` action takes (``dead_letter.Selection``)."""
    p.add_argument("--kind", action="append", default=[], metavar="KIND",
                   help="only this kind, e.g. unknown_schema_id; repeat for more")
    p.add_argument("--partition", type=_count, action="append", default=[], metavar="P",
                   help="only this partition; repeat for more")
    p.add_argument("--since", type=_iso_ms, metavar="ISO8601",
                   help="only records whose Kafka timestamp is at or after this time (no "
                        "zone = UTC; a row written before record times were kept: its "
                        "batch's time)")
    p.add_argument("--until", type=_iso_ms, metavar="ISO8601",
                   help="only records whose Kafka timestamp is before this time")
    p.add_argument("--from-offset", type=_count, default=0, metavar="O",
                   help="only offsets at or above O")
    p.add_argument("--until-offset", type=_count, metavar="O", help="only offsets below O")


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(frozenset(args.kind), frozenset(args.partition), args.since, args.until,
                     args.from_offset, args.until_offset, frozenset(getattr(args, "state", ())))


def _deadletters_list_options(p: argparse.ArgumentParser) -> None:
    _letter_filters(p)
    p.add_argument("--state", action="append", default=[],
                   choices=["waiting", "pending", "sent"],
                   help="only those never re-driven (waiting), being re-driven "
                        "(pending) or re-driven (sent); repeat for more")
    p.add_argument("--limit", type=_count, default=100, metavar="N",
                   help="print at most N of them (default 100; 0: all); the counts "
                        "cover every one")
    p.add_argument("--json", action="store_true", help="one JSON object a line")


def deadletters_list(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.dead_letters import print_list

    return print_list(cfg, _selection(args), args.limit, args.json)


def _deadletters_show_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("record", metavar="PARTITION:OFFSET", help="its partition and offset")
    p.add_argument("--json", action="store_true", help="as one JSON object (bytes as hex)")


def deadletters_show(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.dead_letters import print_one

    return print_one(cfg, args.record, args.json)


def _deadletters_redrive_options(p: argparse.ArgumentParser) -> None:
    _letter_filters(p)
    p.add_argument("--rate", type=float, default=1000.0, metavar="N",
                   help="at most N records a second (default 1000)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would go; send nothing, mark nothing")


def deadletters_redrive(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.redrive import print_redrive

    return print_redrive(cfg, _selection(args), args.rate, args.dry_run,
                         progress=lambda text: print(text, file=sys.stderr))


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["check", "accept"],
                   help="check: check it, writing nothing; accept: record it and the "
                        "session settings as the meaning the session rows are written "
                        "under (added aggregates only, unless --force)")
    p.add_argument("--force", action="store_true",
                   help="accept: record any change the rows can be folded on from, not "
                        "only added aggregates")
    p.add_argument("--sample", type=int, default=20, metavar="N",
                   help="fold the newest N records and print the rows they would give "
                        "(0: check the schema only)")
    p.add_argument("--show-source", action="store_true",
                   help="print the fold the model compiles to")


def model(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    """The config loaded: the model is valid (a bad one stopped at ``load``). Then a sample,
    or (``accept``) the model recorded beside the rows."""
    from collections import Counter

    if args.action == "accept":
        from leakproof.commands.model_accept import accept

        found = accept(cfg, args.force)
        print(f"recorded the model of {cfg.hbase.sessions_table}"
              + (f": {'; '.join(map(str, found))}" if found else " (unchanged)"))
        return 0

    from leakproof.commands.model_check import sample

    m = cfg.model
    print(f"model: {m.schema_file} ({m.format}), session {m.session_key}, time "
          f"{m.event_time}, sequence {m.sequence or '-'}; aggregates: "
          f"{', '.join(a.name for a in m.aggregates)}: OK")
    got = sample(cfg, args.sample)
    if args.show_source:
        print(got.model.source)
    if args.sample > 0:
        kinds = Counter(err.kind for err in got.dead)
        print(f"the newest {got.records} records of {cfg.kafka.topic}: {len(got.rows)} "
              f"sessions, {len(got.dead)} dead letters {dict(kinds) if kinds else ''}".rstrip())
        for err in got.dead[:5]:
            print(f"  dead letter {err}")
        for sid, row in sorted(got.rows.items()):
            print(json.dumps({"session": sid, **row}, sort_keys=True))
    return 0


def _verify_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", type=_spec, action="append", default=[],
                   metavar="SEED:EVENTS:SESSIONS[:START_TS[:SPAN_S]]",
                   help="one per `produce` run")
    p.add_argument("--until-time", type=_zoned_ms, metavar="ISO8601",
                   help="compare with the records a run bounded by this --until-time "
                        "read (a backfill), not the whole topic")


def verify(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    from leakproof.commands.verify import verify as check

    v = check(cfg, args.spec, args.until_time,
              lambda text: print(f"verify: {text}", file=sys.stderr, flush=True))
    print(f"oracle: {v.events} events in the topic, {v.bad_records} bad records, "
          f"{v.sessions} session rows, {v.dead_letters} dead letters"
          f"{f' ({v.redriven} re-driven)' if v.redriven else ''}: "
          f"{'EXACT MATCH' if v.ok else 'MISMATCH'}")
    for problem in v.problems:
        print(f"  {problem}")
    return 0 if v.ok else 1


COMMANDS: tuple[Command | WithActions, ...] = (  # in the order --help lists them
    Command("run", "run the streaming job", _run_options, run, reads_events=True),
    Command("stop", "ask the running job of this topic and group to stop after its batch "
                    "in flight (works where no signal can: YARN cluster mode)",
            _stop_options, stop),
    Command("produce", "produce seeded, realistic web sessions", _produce_options, produce),
    Command("topic", "create the configured topic", _topic_options, topic),
    Command("tables", "create the HBase tables (idempotent)", _tables_options, tables),
    WithActions("offsets", "committed offsets: show, history, lag, rewind", (
        Command("show", "the newest commit", _offsets_show_options, offsets_history),
        Command("history", "the newest commits, newest first", _offsets_history_options,
                offsets_history),
        Command("lag", "per partition: committed offset, log end, lag in records and "
                       "seconds, state; a table like kafka-consumer-groups --describe",
                _offsets_lag_options, offsets_lag),
        Command("rewind", "commit earlier offsets for the next run to resume from",
                _offsets_rewind_options, offsets_rewind),
    )),
    WithActions("sessions", "session rows: read one, compare two table sets", (
        Command("get", "print one session row", _sessions_get_options, sessions_get),
        Command("diff", "compare the session rows (family s) of two table sets, e.g. the "
                        "live tables and a reprocessed copy: exit 1 on any difference",
                _sessions_diff_options, sessions_diff),
    ), reads_events=True),
    WithActions("deadletters", "the records set aside: list, show, redrive", (
        Command("list", "the dead letters of the topic, one a line, and their counts by "
                        "kind and redrive state", _deadletters_list_options, deadletters_list),
        Command("show", "one dead letter: the record as Kafka had it (key and value as hex "
                        "and text, headers), its error, its redrive",
                _deadletters_show_options, deadletters_show),
        Command("redrive", "send the selected dead letters back to the topic, as they were, "
                           "each exactly once, in Kafka transactions",
                _deadletters_redrive_options, deadletters_redrive),
    )),
    Command("model", "check the event model (events:, aggregates:) against its schema and "
                     "the topic's newest records; writes nothing",
            _model_options, model, reads_events=True),
    Command("verify", "compare HBase with the oracle for the given production runs",
            _verify_options, verify, reads_events=True),
)


if __name__ == "__main__":
    sys.exit(main())
