#!/usr/bin/env python3
"""The same job written the Structured Streaming way: the peer ``make bench`` measures against.

Kafka source -> Avro decode -> drop repeated (session_id, seq) -> ``groupBy(session_id)``
stateful aggregation in the RocksDB state store -> ``foreachBatch`` puts of the updated
sessions' ``s`` cells to HBase with happybase. What a Spark user would write in a few dozen
lines, tuned as they would tune it: shuffle partitions = the topic's partitions, the same
master, the same records per batch as leakproof (``kafka.max_rate_per_partition`` x
partitions x ``job.batch_interval_s``) unless ``--one-batch``.

Two decoders (``--decode``):
* ``jvm``: ``from_avro``, inside the engine (Avro support ships in Spark 4's SQL jars);
* ``pandas``: ``mapInPandas`` with fastavro, the Python decode leakproof also uses.

It does less than leakproof, which favours it: no late-event rule, no out-of-order count, no
open/closed state, no dead letters, no offsets rows an HBase user can read (its offsets live in
its checkpoint). The bench checks its rows against a fold of its own semantics.

The Kafka and Avro connectors come from Maven Central through ``spark.jars.packages``: for
each, the newest release not newer than the engine (``PEER_KAFKA_CONNECTOR`` and
``PEER_AVRO_CONNECTOR`` override the versions).

With ``--kafka-sink TOPIC`` the updated sessions go to a Kafka topic as JSON instead (update
mode's records: what a Structured Streaming user has nearest to live session updates).

Prints one ``PEER {json}`` line: per batch, its start, duration, rows and end offsets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from leakproof.core import config
from leakproof.core.events import schema_json
from leakproof.kafka.admin import KafkaMetadata

ROOT = Path(__file__).resolve().parent.parent
METADATA = "https://repo1.maven.org/maven2/org/apache/spark/{artifact}/maven-metadata.xml"
# the columns of family `s` the peer writes: those its semantics share with leakproof's
COLUMNS = ("user_id", "events", "pageviews", "clicks", "purchases", "errors", "bytes",
           "first_ts", "last_ts", "entry_url", "exit_url")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def connector(artifact: str, engine: str, override: str) -> str:
    """The Maven coordinate of ``artifact``'s newest release <= the engine's version (Central
    may not serve one for every engine release: here, Avro stopped at 4.1.1)."""
    if os.environ.get(override):
        version = os.environ[override]
    else:
        version = engine
        try:
            with urllib.request.urlopen(METADATA.format(artifact=artifact), timeout=20) as reply:
                served = re.findall(r"<version>(\d+\.\d+\.\d+)</version>", reply.read().decode())
            fitting = [v for v in served if _version(v) <= _version(engine)]
            if fitting:
                version = max(fitting, key=_version)
        except OSError as exc:
            print(f"peer: Maven Central metadata unreadable ({exc}); trying {engine}",
                  file=sys.stderr)
    return f"org.apache.spark:{artifact}:{version}"


def ivy_settings(cache: Path) -> Path:
    """Resolve from Maven Central only, into the project's cache. Spark's default chain also
    asks ~/.m2, where Maven may have left a pom without its jar (seen: jsr305 3.0.0), and then
    fails the download instead of going on to Central."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / "ivysettings.xml"
    path.write_text(f"""<ivysettings>
  <settings defaultResolver="central"/>
  <caches defaultCacheDir="{cache / 'cache'}"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
""")
    return path


def _put_rows(hbase: config.HBaseConfig, table: str, rows: Iterator[Any]) -> None:
    """One partition of a batch's updated sessions -> whole `s` rows, in happybase batches."""
    from leakproof.hbase.connection import connect

    conn = connect(hbase)
    try:
        with conn.table(table).batch(batch_size=1000) as batch:
            for row in rows:
                batch.put(row["session_id"].encode(), {
                    f"s:{c}".encode(): str(row[c]).encode() for c in COLUMNS})
    finally:
        conn.close()


def _decode_frames(frames: Iterator[Any]) -> Iterator[Any]:
    """mapInPandas: schemaless Avro values -> the event columns the aggregation needs."""
    import io

    import fastavro
    import pandas as pd

    schema = fastavro.parse_schema(schema_json())
    keep = ("session_id", "user_id", "seq", "ts", "event_type", "url", "status", "bytes")
    for frame in frames:
        records = []
        for value in frame["value"]:
            try:
                records.append(fastavro.schemaless_reader(io.BytesIO(value), schema, None))
            except Exception:  # noqa: BLE001 - a bad record is skipped, as from_avro's
                continue       # PERMISSIVE mode makes it null and the query filters it
        yield pd.DataFrame.from_records(records, columns=keep)


def main() -> int:
    args = _arguments()
    cfg = config.load(args.config)
    topic = cfg.kafka.topic
    meta = KafkaMetadata(cfg.kafka)
    bounds = meta.log_bounds(topic, meta.partitions(topic))
    meta.close()
    total = args.expect or sum(b.log_end - b.log_start for b in bounds.values())
    _ensure_table(cfg, args.table)
    spark = _spark(cfg, len(bounds), args)
    sessions, mode = _sessions(_events(spark, cfg, len(bounds), args), cfg, args)
    hbase, table = cfg.hbase, args.table

    def write(batch: Any, _batch_id: int) -> None:
        batch.foreachPartition(lambda rows: _put_rows(hbase, table, rows))

    if args.kafka_sink:  # each updated session as JSON to a topic: live updates' nearest kin
        from pyspark.sql import functions as F  # noqa: N812

        stream = (sessions.select(F.col("session_id").alias("key"),
                                  F.to_json(F.struct(*sessions.columns)).alias("value"))
                  .writeStream.outputMode(mode).format("kafka")
                  .option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
                  .option("topic", args.kafka_sink))
    else:
        stream = sessions.writeStream.outputMode(mode).foreachBatch(write)
    query = (stream.option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=f"{cfg.job.batch_interval_s} seconds").start())
    done = 0
    while done < total and query.isActive:
        time.sleep(0.5)
        done = sum(p["numInputRows"] for p in query.recentProgress)
    failed = query.exception()
    query.stop()
    batches = _batches(query.recentProgress, topic)
    spark.stop()
    if failed is not None:
        print(f"peer: the query failed: {failed}", file=sys.stderr)
        return 1
    print("PEER " + json.dumps({"total": total, "done": done, "batches": batches}), flush=True)
    return 0 if done >= total else 1


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--table", required=True, help="the HBase table to write (family s)")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--decode", choices=("jvm", "pandas"), default="jvm")
    parser.add_argument("--expect", type=int, default=0,
                        help="stop after this many records (default: what the topic holds now)")
    parser.add_argument("--one-batch", action="store_true",
                        help="no maxOffsetsPerTrigger: the whole backlog in one batch")
    parser.add_argument("--session-window", type=float, default=0, metavar="GAP_S",
                        help="group by session_id and session_window(ts, GAP_S) under a "
                             "watermark of the config's grace (append mode: each session "
                             "once it closed), rows keyed <session_id>:<start, 13 digits>")
    parser.add_argument("--kafka-sink", metavar="TOPIC", default="",
                        help="write each updated session as JSON to TOPIC (Spark's Kafka "
                             "sink, at least once) instead of HBase")
    return parser.parse_args()


def _ensure_table(cfg: config.Config, table: str) -> None:
    from leakproof.hbase.connection import connect, families

    conn = connect(cfg.hbase)
    try:
        if table.encode() not in conn.tables():
            conn.create_table(table, families("s"))  # as the job makes its own
    finally:
        conn.close()


def _spark(cfg: config.Config, partitions: int, args: argparse.Namespace) -> Any:
    """A local session with the Kafka and Avro connectors of this pyspark's version and
    RocksDB state, one shuffle partition a Kafka partition."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark
    from pyspark.sql import SparkSession

    engine = pyspark.__version__
    scala = "2.13"
    package = ",".join((
        connector(f"spark-sql-kafka-0-10_{scala}", engine, "PEER_KAFKA_CONNECTOR"),
        connector(f"spark-avro_{scala}", engine, "PEER_AVRO_CONNECTOR")))
    print(f"peer: engine {engine}, {package}, decode {args.decode}, "
          f"{'one batch' if args.one_batch else 'capped batches'}", flush=True)
    spark = (SparkSession.builder.master(cfg.job.master).appName("leakproof-peer")
             .config("spark.jars.packages", package)
             .config("spark.jars.ivySettings", str(ivy_settings(ROOT / ".services" / "ivy")))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .config("spark.sql.shuffle.partitions", str(partitions))
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _events(spark: Any, cfg: config.Config, partitions: int, args: argparse.Namespace) -> Any:
    """The topic from its start as a stream of decoded events (capped batches unless
    ``--one-batch``), decoded by ``from_avro`` in the JVM or fastavro in ``mapInPandas``."""
    from pyspark.sql import functions as F  # noqa: N812 - the name every Spark user knows
    from pyspark.sql.avro.functions import from_avro

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
              .option("subscribe", cfg.kafka.topic).option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true"))
    if not args.one_batch:
        per_batch = cfg.kafka.max_rate_per_partition * partitions * cfg.job.batch_interval_s
        reader = reader.option("maxOffsetsPerTrigger", str(int(per_batch)))
    raw = reader.load()
    if args.decode == "jvm":
        value = from_avro(F.col("value"), json.dumps(schema_json()), {"mode": "PERMISSIVE"})
        return (raw.select(value.alias("e")).select("e.*")
                .where(F.col("session_id").isNotNull()))
    return raw.select("value").mapInPandas(
        _decode_frames, "session_id string, user_id string, seq long, ts long, "
        "event_type string, url string, status int, bytes long")


def _sessions(events: Any, cfg: config.Config, args: argparse.Namespace) -> tuple[Any, str]:
    """The web model's aggregates by session id (update mode), or by session id and Spark's
    ``session_window`` under a watermark (append mode: each session once, closed); with the
    output mode they need."""
    from pyspark.sql import functions as F  # noqa: N812

    def count_if(condition: Any) -> Any:
        return F.sum(F.when(condition, 1).otherwise(0))

    keys: list[Any] = ["session_id"]
    mode = "update"
    if args.session_window:  # Spark's gap sessions: closed ones go out once (append)
        events = (events.withColumn("t", F.timestamp_millis("ts"))
                  .withWatermark("t", f"{int(cfg.sessions.grace_s * 1000)} milliseconds"))
        keys.append(F.session_window("t", f"{int(args.session_window * 1000)} milliseconds")
                    .alias("w"))
        mode = "append"
    sessions = (events.dropDuplicates(["session_id", "seq"]).groupBy(*keys).agg(
        F.min_by("user_id", "seq").alias("user_id"),
        F.count(F.lit(1)).alias("events"),
        count_if(F.col("event_type") == "pageview").alias("pageviews"),
        count_if(F.col("event_type") == "click").alias("clicks"),
        count_if(F.col("event_type") == "purchase").alias("purchases"),
        count_if(F.col("status") >= 500).alias("errors"),
        F.sum("bytes").alias("bytes"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.min_by("url", "seq").alias("entry_url"),
        F.max_by("url", "seq").alias("exit_url")))
    if args.session_window:
        sessions = sessions.withColumn("session_id", F.format_string(
            "%s:%013d", "session_id", F.col("first_ts"))).drop("w")
    return sessions, mode


def _batches(progress: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    """The query's batches that read something: rows, end offsets, start and duration."""
    batches = []
    for p in progress:
        if p["numInputRows"]:
            started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            ends = p["sources"][0]["endOffset"]
            ends = json.loads(ends) if isinstance(ends, str) else ends
            batches.append({"batch": p["batchId"], "rows": p["numInputRows"],
                            "ends": {int(k): int(v) for k, v in ends[topic].items()},
                            "start_ms": started.timestamp() * 1000,
                            "took_ms": p["durationMs"].get("triggerExecution", 0)})
    return batches


if __name__ == "__main__":
    sys.exit(main())
