"""``leakproof``: argument parsing only; every command calls the modules below it."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from leakproof import config as config_mod
from leakproof.errors import ConfigError, LeakproofError
from leakproof.generator import DEFAULT_START_TS, GeneratorSpec


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


def _iso_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leakproof", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)

    def cmd(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--config", required=True, help="path to config.yml")
        return p

    run = cmd("run", "run the streaming job")
    run.add_argument("--until-idle", type=float, metavar="S",
                     help="stop gracefully after S seconds without new records")
    run.add_argument("--max-batches", type=int, metavar="N", help="stop after N batches")
    run.add_argument("--log-format", choices=["text", "json"], default="text",
                     help="the per-batch progress line as text or as one JSON object")

    stop = cmd("stop", "ask the running job of this topic and group to stop after its batch "
                       "in flight (works where no signal can: YARN cluster mode)")
    stop.add_argument("--wait", type=float, metavar="S",
                      help="wait up to S seconds until it has stopped, and say where")

    produce = cmd("produce", "produce seeded, realistic web sessions")
    produce.add_argument("--events", type=int, required=True)
    produce.add_argument("--sessions", type=int, required=True)
    produce.add_argument("--seed", type=int, required=True)
    produce.add_argument("--rate", type=float, help="events per second (default: unthrottled)")
    produce.add_argument("--span-s", type=int,
                         help="event time over which sessions start (default: 2 s per session)")
    produce.add_argument("--start-ts", type=int, default=DEFAULT_START_TS,
                         help="event time of the first session, epoch ms")

    topic = cmd("topic", "create the configured topic")
    topic.add_argument("action", choices=["create"])
    topic.add_argument("--partitions", type=int, required=True)

    tables = cmd("tables", "create the HBase tables (idempotent)")
    tables.add_argument("action", choices=["create"])

    offsets = cmd("offsets", "committed offsets: show, history, lag, rewind")
    offsets.add_argument("action", choices=["show", "history", "lag", "rewind"])
    offsets.add_argument("--limit", type=int, default=20)
    where = offsets.add_mutually_exclusive_group()
    where.add_argument("--to-batch", type=int, metavar="BATCH_MS",
                       help="rewind: the offsets of this earlier row")
    where.add_argument("--to-time", type=_iso_ms, metavar="ISO8601",
                       help="rewind: the first records at or after this Kafka record time "
                            "(no zone = UTC)")
    where.add_argument("--to-offsets", metavar="P=O[,P=O...]",
                       help="rewind: these partitions to these offsets, the rest as they are")

    sessions = cmd("sessions", "read a session row")
    sessions.add_argument("action", choices=["get"])
    sessions.add_argument("session_id")

    verify = cmd("verify", "compare HBase with the oracle for the given production runs")
    verify.add_argument("--spec", type=_spec, action="append", default=[],
                        metavar="SEED:EVENTS:SESSIONS[:START_TS[:SPAN_S]]",
                        help="one per `produce` run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = config_mod.load(args.config)
        return _dispatch(args, cfg)
    except ConfigError as exc:
        print(f"leakproof: config error: {exc}", file=sys.stderr)
        return 2
    except LeakproofError as exc:
        print(f"leakproof: {exc}", file=sys.stderr)
        return 1


def _secured_services(cfg: config_mod.Config) -> str:
    """What the job logs in for, as an error at start names it."""
    names = [cfg.hbase.kerberos_service()] if cfg.hbase.auth == "kerberos" else []
    if cfg.kafka.uses_gssapi:
        names.append(f"Kafka at {cfg.kafka.bootstrap_servers}")
    return " and ".join(names) or "a secured service"


def _dispatch(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    if args.cmd == "run":
        from leakproof.driver.job import Job, RunLimits, spark_context

        if cfg.kerberos is not None:  # a bad login stops the run before any JVM starts
            from leakproof.kerberos import login

            login(cfg.kerberos, _secured_services(cfg))
        spark_context(cfg)
        return Job(cfg, RunLimits(args.until_idle, args.max_batches, args.log_format)).run()
    if args.cmd == "stop":
        from leakproof.stop import ask_to_stop

        return ask_to_stop(cfg, args.wait)
    if args.cmd == "produce":
        from leakproof.generator import generate
        from leakproof.produce import send_events

        spec = GeneratorSpec(args.seed, args.events, args.sessions, args.start_ts,
                             span_s=args.span_s)
        report = send_events(cfg.kafka, cfg.kafka.topic, generate(spec), args.rate)
        print(f"produced {report.records} events ({spec.sessions} sessions, seed {spec.seed}) "
              f"to {cfg.kafka.topic} in {report.seconds:.1f}s ({report.rate:.0f} ev/s)")
        return 0
    if args.cmd == "topic":
        from leakproof.produce import create_topic

        made = create_topic(cfg.kafka, cfg.kafka.topic, args.partitions)
        print(f"topic {cfg.kafka.topic}: {'created' if made else 'exists'}")
        return 0
    from leakproof.hbase.connection import connect, ensure_tables

    if args.cmd == "verify":
        from leakproof.verify import verify

        v = verify(cfg, args.spec)
        print(f"oracle: {v.events} events in the topic, {v.bad_records} bad records, "
              f"{v.sessions} session rows, {v.dead_letters} dead letters: "
              f"{'EXACT MATCH' if v.ok else 'MISMATCH'}")
        for problem in v.problems:
            print(f"  {problem}")
        return 0 if v.ok else 1
    conn = connect(cfg.hbase)
    try:
        if args.cmd == "tables":
            created = ensure_tables(conn, cfg.hbase)
            print(f"tables created: {', '.join(created) or 'none (all exist)'}")
        elif args.cmd == "offsets" and args.action == "rewind":
            from leakproof.rewind import RewindTarget, parse_offsets, rewind

            if args.to_batch is None and args.to_time is None and args.to_offsets is None:
                print("leakproof: offsets rewind needs --to-batch, --to-time or --to-offsets",
                      file=sys.stderr)
                return 2
            try:
                explicit = parse_offsets(args.to_offsets) if args.to_offsets else None
            except ValueError as exc:
                print(f"leakproof: --to-offsets: {exc}", file=sys.stderr)
                return 2
            batch_ms, new = rewind(cfg, RewindTarget(args.to_batch, args.to_time, explicit))
            print(json.dumps({"batch_ms": batch_ms, "offsets": new}, sort_keys=True))
        elif args.cmd == "offsets" and args.action == "lag":
            from leakproof.lag import lag

            behind = lag(cfg)
            print(json.dumps(behind, sort_keys=True))
            return 0 if behind["committed_ms"] is not None else 1
        elif args.cmd == "offsets":
            from leakproof.commit_stores import open_store

            store = open_store(cfg)
            try:
                rows = store.history(1 if args.action == "show" else args.limit)
            finally:
                store.close()
            if not rows:
                print(f"no committed offsets for {cfg.kafka.topic}:{cfg.kafka.group_id}")
                return 1
            for row in rows:
                print(json.dumps({"batch_ms": row.batch_ms, "offsets": row.offsets,
                                  "audit": row.audit}, sort_keys=True))
        elif args.cmd == "sessions":
            from leakproof.hbase.session_store import SessionStore

            got = SessionStore(conn.table(cfg.hbase.sessions_table)).get(args.session_id)
            if got is None:
                print(f"no session {args.session_id}", file=sys.stderr)
                return 1
            print(json.dumps(got, indent=2, sort_keys=True))
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
