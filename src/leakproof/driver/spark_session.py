"""The SparkContext leakproof runs on and what it asks of Spark besides the stream: its
settings (spark-submit's win), the refusal of Spark Connect, the executors' locations, an RDD
whose partitions prefer them, and the Python workers started ahead of the first batch."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from leakproof.core.config import Config
from leakproof.core.errors import ConfigError
from leakproof.driver import spark_compat
from leakproof.driver.batch import BatchPlan
from leakproof.driver.grouping import group
from leakproof.driver.placement import place

log = logging.getLogger(__name__)


def executor_locations(sc: Any) -> list[str] | None:
    """The live executors as Spark location strings (``executor_<host>_<id>``): the hosts
    from the status tracker, each host's executor ids from the task scheduler (Py4J cannot
    reflect on the block manager's classes without protobuf on the driver's class path).
    None: this Spark would not say (the caller warns once and runs without preferences)."""
    try:
        scheduler = sc._jsc.sc().taskScheduler()
        spark = spark_compat.line(sc)
        found = []
        for host in {i.host() for i in sc._jsc.sc().statusTracker().getExecutorInfos()}:
            ids = scheduler.getExecutorsAliveOnHost(host)
            if ids.isDefined():
                found += [f"executor_{host}_{e}" for e in spark.to_java_list(sc._jvm, ids.get())
                          if e != "driver"]
        return sorted(found)
    except Exception:  # placement is a preference: run without it
        log.debug("cannot list the executors", exc_info=True)
        return None


def warm_up_workers(sc: Any, cfg: Config, wanted: Callable[[], bool],
                    wait_s: float = 30.0) -> threading.Thread:
    """Start every executor's Python worker now, in a thread of its own, so that the first
    batch does not pay for it: a worker's start (the interpreter, pyspark, then leakproof's
    Kafka, Thrift and Avro imports, the schema, an HBase connection) took ~3.5 s on a loaded
    two-core machine, and after a restart the first batch is the one carrying the backlog.

    One task per executor, preferring it (on a cluster, once executors have registered:
    waited for up to ``wait_s`` while ``wanted()`` holds, i.e. until a batch is dispatched,
    whose tasks would start the workers anyway); in local mode one per core. A failure here
    only costs the head start."""

    def run() -> None:
        from leakproof.task.worker import warm_up

        started = time.monotonic()
        try:
            if str(sc.master).startswith("local"):
                slots = int(sc.defaultParallelism)
                rdd = sc.parallelize(range(slots), slots)
            else:
                executors = executor_locations(sc)
                while not executors and wanted() and time.monotonic() - started < wait_s:
                    time.sleep(0.2)
                    executors = executor_locations(sc)
                if not executors or not wanted():
                    return
                rdd = rdd_with_locations(sc, [(e, e) for e in executors])
            with contextlib.suppress(Exception):
                sc.setJobDescription("leakproof: starting the Python workers")
            took = rdd.mapPartitions(lambda _: [warm_up(cfg)]).collect()
            log.info("started %d Python workers in %.1fs", len(took), time.monotonic() - started)
        except Exception:  # the first batch starts its workers itself
            log.debug("could not start the Python workers ahead of the first batch",
                      exc_info=True)

    thread = threading.Thread(target=run, name="leakproof-warm-up", daemon=True)
    thread.start()
    return thread


def rdd_with_locations(sc: Any, items: list[tuple[Any, str]]) -> Any:
    """A Python RDD with one partition per item, each preferring its location.

    ``parallelize`` cannot take preferred locations; ``SparkContext.makeRDD`` can. Each
    element is what ``parallelize`` would send in a batch of one: a pickled one-item list.
    """
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    jvm, pickler = sc._jvm, CPickleSerializer()
    spark = spark_compat.line(sc)
    pairs = jvm.java.util.ArrayList()
    for item, location in items:
        where = spark.to_seq(jvm, jvm.java.util.Collections.singletonList(location))
        pairs.add(jvm.scala.Tuple2(pickler.dumps([item]), where))  # type: ignore[no-untyped-call]
    tag = jvm.scala.reflect.ClassTag.AnyRef()
    jrdd = sc._jsc.sc().makeRDD(spark.to_seq(jvm, pairs), tag)
    return RDD(jvm.org.apache.spark.api.java.JavaRDD.fromRDD(jrdd, tag), sc,
               BatchedSerializer(pickler, 1))  # type: ignore[no-untyped-call]


class BatchTasks:
    """A batch's RDD: one Spark partition per task, each holding a run of ranges
    (``grouping``), each preferring the executor its partitions ran on last (``placement``):
    the placement is kept from batch to batch."""

    def __init__(self) -> None:
        self._placement: dict[int, str] = {}
        self._warned = False

    def rdd(self, sc: Any, plan: BatchPlan) -> Any:
        executors = executor_locations(sc)
        if executors is None and not self._warned:
            self._warned = True
            log.warning("cannot list the executors; ranges run without a preferred executor")
        cores = 1 if plan.one_task else int(sc.defaultParallelism)
        if not executors or plan.one_task:  # local mode (nothing to prefer), none listed yet
            runs = [ranges for ranges, _ in group(plan.work, cores)]
            return sc.parallelize(runs, len(runs))
        # every assigned partition, with records or not, so a quiet one keeps its executor
        # and the first placement does not depend on which partitions had records
        placed = place((r.partition for r in plan.ranges), executors, self._placement)
        if placed != self._placement:
            log.info("ranges prefer executors: %s", ", ".join(
                f"p{p}@{where.rsplit('_', 1)[-1]}" for p, where in sorted(placed.items())))
        self._placement = placed
        return rdd_with_locations(sc, [(ranges, where or "")
                                       for ranges, where in group(plan.work, cores, placed)])


# An executor's JVM only hands ranges to its Python workers, which read, fold and write, and
# takes their small reports back: C2's compiles cost such a JVM more CPU than they win back,
# and they compete with the driver's and the other executors' start after a restart. In
# `make bench-recovery` runs (standalone, 2 cores) alternating with and without C1 only, a
# driver SIGKILL cost 29.2-30.1 s against 34.0-35.9 s to the next commit, then 19.2-23.7 s
# against 22.4-27.6 s. The driver's JVM plans, schedules and commits, none of it per record:
# C1 only, `make bench` (1 M events) took its JVM 8.3-8.7 CPU s per M events against
# 14.8, and a steady 150 s at 20 000 ev/s 3.4 against 5.4, p99 the same (3.47 s). Defaults,
# not extra options: Spark puts spark.*.extraJavaOptions after them, so a user's flags
# still win. The driver's takes effect where leakproof starts the JVM (``leakproof run``);
# under spark-submit the JVM is already running, and spark-submit's own conf decides.
JVM_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


# What leakproof sets unless job.spark_conf or spark-submit (with its spark-defaults.conf)
# already did.
SPARK_DEFAULTS: Mapping[str, str] = MappingProxyType({
    "spark.ui.showConsoleProgress": "false",
    "spark.streaming.concurrentJobs": "1",
    "spark.executor.defaultJavaOptions": JVM_JAVA_OPTIONS,
    "spark.driver.defaultJavaOptions": JVM_JAVA_OPTIONS,
})


def apply_settings(conf: Any, cfg: Config) -> None:
    """config.yml's job.spark_conf, then leakproof's defaults, each only for a key nothing set
    before: spark-submit's --conf and spark-defaults.conf, already in ``conf``, win."""
    for key, value in [*cfg.job.spark_conf.items(), *SPARK_DEFAULTS.items()]:
        conf.setIfMissing(key, value)


def take_file_defaults(conf: Any, environ: Mapping[str, str],
                       spark_home: Callable[[], str]) -> None:
    """Put spark-defaults.conf's entries in ``conf`` (where nothing set them) before
    leakproof starts the JVM itself: it starts with every entry of ``conf`` as a --conf,
    which would beat the file, so an administrator's settings there (Java options, Kerberos,
    logging) win over config.yml's and leakproof's defaults, as under spark-submit."""
    found = defaults_file(environ, spark_home)
    if found is not None:
        for key, value in file_settings(found.read_text(errors="replace")).items():
            conf.setIfMissing(key, value)


def defaults_file(environ: Mapping[str, str], spark_home: Callable[[], str]) -> Path | None:
    """The spark-defaults.conf spark-submit reads: in SPARK_CONF_DIR, else SPARK_HOME's (or
    pyspark's own) ``conf``; None where there is none."""
    conf_dir = environ.get("SPARK_CONF_DIR") or os.path.join(
        environ.get("SPARK_HOME") or spark_home(), "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    return path if path.is_file() else None


def file_settings(text: str) -> dict[str, str]:
    """The ``spark.*`` entries of a spark-defaults.conf, read as Java reads a properties file
    (``key value``, ``key=value`` or ``key: value``; ``#`` and ``!`` comments; a line ending
    in a backslash continues), values trimmed as Spark trims them. Other escapes are taken
    as written: Spark's own settings do not use them."""
    found: dict[str, str] = {}
    held = ""  # a logical line so far, continued by a trailing backslash
    for raw in text.splitlines():
        line = held + raw.lstrip()
        if not held and (not line or line[0] in "#!"):
            continue  # blank, or a comment (which a backslash does not continue)
        held = ""
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            held = line[:-1]
            continue
        key, value = _split_property(line)
        if key.startswith("spark."):
            found[key] = value.strip()
    return found


def _split_property(line: str) -> tuple[str, str]:
    """A properties line's key and value: the key ends at the first whitespace, ``=`` or
    ``:``; one ``=`` or ``:`` after whitespace belongs to the separator too."""
    for i, ch in enumerate(line):
        if ch in " \t\f=:":
            rest = line[i + 1:] if ch in "=:" else line[i:].lstrip(" \t\f")
            if ch not in "=:" and rest[:1] in ("=", ":"):
                rest = rest[1:]
            return line[:i], rest.lstrip(" \t\f")
    return line, ""


def spark_connect_requested(environ: Mapping[str, str], spark_conf: Mapping[str, str]
                            ) -> str | None:
    """What asks for a Spark Connect session (None: nothing does). A Connect client has no
    SparkContext, so no StreamingContext: DStreams cannot run there."""
    if environ.get("SPARK_CONNECT_MODE_ENABLED", "").lower() in ("1", "true"):
        return "SPARK_CONNECT_MODE_ENABLED is set"
    if environ.get("SPARK_REMOTE"):
        return "SPARK_REMOTE is set (spark-submit --remote)"
    if str(spark_conf.get("spark.api.mode", "")).lower() == "connect":
        return "spark.api.mode is connect"
    if spark_conf.get("spark.remote"):
        return "spark.remote is set"
    return None


def spark_context(cfg: Config) -> Any:
    """The SparkContext for ``leakproof run``: spark-submit's settings win over config.yml."""
    from pyspark import SparkConf, SparkContext

    connect = spark_connect_requested(os.environ, cfg.job.spark_conf)
    if connect is not None:
        raise ConfigError(f"Spark Connect was asked for ({connect}), and a Spark Connect "
                          f"session cannot run DStreams (it has no SparkContext); run "
                          f"leakproof with a classic session: spark-submit without --remote, "
                          f"spark.api.mode=classic")

    # Executors must run the Python that has leakproof and its dependencies installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf()
    # Under spark-submit the JVM already runs (it set PYSPARK_GATEWAY_PORT) and holds the
    # master and app name it was given; a SparkConf made before the context cannot see them.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        conf.setMaster(cfg.job.master).setAppName(cfg.job.app_name)
        from pyspark.find_spark_home import _find_spark_home

        take_file_defaults(conf, os.environ, _find_spark_home)
    apply_settings(conf, cfg)
    if submitted:
        sc = SparkContext.getOrCreate(conf)
    else:
        from pyspark.java_gateway import launch_gateway

        # The JVM gets a session of its own: a signal to this run's process group (systemd,
        # a container stop, Ctrl-C) then reaches only this process, which lets the batch in
        # flight finish. The JVM still dies with this process: it exits when its stdin, a
        # pipe from here, closes.
        gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
        sc = SparkContext(conf=conf, gateway=gateway)
    sc.setLogLevel(os.environ.get("LEAKPROOF_SPARK_LOG_LEVEL", "WARN"))
    spark = spark_compat.line(sc)
    if not spark.supported:
        sc.stop()
        raise ConfigError(f"Spark {sc.version} is not supported: leakproof runs on Spark 3.5 "
                          f"and 4.x (spark-submit from such a Spark, or its pyspark wheel)")
    ui = sc.uiWebUrl  # None with spark.ui.enabled=false
    log.info("Spark %s (Scala %d.%d); %s", sc.version, *spark.scala,
             f"Spark UI at {ui}" if ui else "Spark UI off (spark.ui.enabled=false)")
    return sc
