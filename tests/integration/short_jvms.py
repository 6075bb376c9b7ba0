"""Cheaper Spark JVMs for the tests: the settings, and a class-data-sharing archive of the
classes a local-mode driver loads.

On two cores CPU bounds the suite, and most of what a test spends is starting Spark JVMs that
then live seconds to a minute. Three things make each one cheaper:

- C1 only and the serial GC: C2's compiles and G1's threads cost such JVMs more than they win
  back (a pair of pipeline tests: 47 -> 35-38 CPU s over the whole machine).
- A dynamic CDS archive (JDK 13+) of the driver's classes, made once per Spark and JDK: the
  JVM maps them instead of parsing and verifying thousands of classes from Spark's jars (the
  driver JVM of a `leakproof run` on an empty topic: 2.9-3.5 -> 1.9-2.5 CPU s). CDS refuses
  a class path holding a non-empty directory, and spark-submit puts SPARK_CONF_DIR first on
  it, so the tests' SPARK_CONF_DIR is an empty directory and their Spark settings travel as
  ``-Dspark.*`` system properties in SPARK_SUBMIT_OPTS, which SparkConf reads and
  spark-submit's ``--conf`` overrides.
- YARN applications find Spark's jars in place (``spark.yarn.jars=local:``), instead of
  zipping, staging and unpacking 460 MB per application (20 s of each AM's start here).

Tests only: `leakproof run`, `make run` and the benches keep the JVM's defaults, except that
every run's executors, and the driver leakproof starts itself, are C1-only anyway
(driver/spark_session.py, JVM_JAVA_OPTIONS); here they also get the serial GC, which the
job cannot impose on a user's JVMs. A JVM the
archive does not fit (another class path, a changed JDK) runs without it, silently.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pyspark

from .helpers import ROOT, spark_submit

SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_JARS = Path(pyspark.__file__).resolve().parent / "jars"
# for the JVMs spark-submit does not start itself: executors, a YARN AM, a cluster-mode driver
SPARK_SETTINGS = {
    "spark.driver.extraJavaOptions": SHORT_JVM,
    "spark.executor.extraJavaOptions": SHORT_JVM,
    "spark.yarn.am.extraJavaOptions": SHORT_JVM,
    "spark.yarn.jars": f"local:{SPARK_JARS}/*",
}
CDS_DIR = ROOT / ".services" / "cds"
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"  # an archive that does not fit is no news

# what a streaming driver loads: a context, Python RDDs, a DStream and its batches
_WARM_JOB = """
from pyspark import SparkContext
from pyspark.streaming import StreamingContext
sc = SparkContext("local[1]", "cds-archive")
assert sc.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
ssc = StreamingContext(sc, 0.5)


def count(rdd):
    rdd.count()  # and returns None: foreachRDD takes a returned value for a new RDD


ssc.queueStream([sc.parallelize([1, 2])]).foreachRDD(count)
ssc.start()
ssc.awaitTerminationOrTimeout(1.5)
ssc.stop(stopSparkContext=True, stopGraceFully=False)
"""


def _java() -> str:
    java = shutil.which("java")
    return os.path.realpath(java) if java else "java"


def driver_archive(conf_dir: Path) -> Path | None:
    """The archive for drivers with ``conf_dir`` as SPARK_CONF_DIR, made on first use (under
    a lock: xdist workers start together); None if it could not be made."""
    java = _java()
    key = hashlib.sha256("|".join((pyspark.__version__, java, str(os.stat(java).st_mtime),
                                   SHORT_JVM, str(conf_dir), _WARM_JOB)).encode()).hexdigest()
    archive = CDS_DIR / f"driver-{key[:16]}.jsa"
    with open(CDS_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.is_file():
            return archive
        script = CDS_DIR / "warm_job.py"
        script.write_text(_WARM_JOB)
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
        env.update(SPARK_CONF_DIR=str(conf_dir), PYSPARK_PYTHON=sys.executable)
        out = subprocess.run(
            [str(spark_submit()), "--driver-java-options",
             f"{SHORT_JVM} -XX:ArchiveClassesAtExit={partial}", str(script)],
            env=env, capture_output=True, text=True, timeout=300, check=False)
        if out.returncode != 0 or not partial.is_file():
            warnings.warn(f"no CDS archive for the tests' Spark drivers (they start without "
                          f"it): {out.stderr[-2000:]}", stacklevel=1)
            return None
        for old in CDS_DIR.glob("driver-*.jsa"):  # for another Spark or JDK: 75 MB each
            old.unlink()
        partial.rename(archive)
        return archive


def submit_opts(archive: Path | None) -> str:
    """SPARK_SUBMIT_OPTS: the driver JVM's own options plus SPARK_SETTINGS as properties."""
    opts = [SHORT_JVM]
    if archive is not None:
        opts += [f"-XX:SharedArchiveFile={archive}", QUIET_CDS]
    opts += [f'"-D{key}={value}"' for key, value in SPARK_SETTINGS.items()]
    return " ".join(opts)


def conf_dir() -> Path:
    """The tests' SPARK_CONF_DIR: empty, and the same path in every session (see above)."""
    conf = CDS_DIR / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for leftover in conf.iterdir():
        leftover.unlink()
    return conf


def install() -> None:
    """Point this process's environment (and so every spark-submit a test starts, directly
    or under `leakproof run`) at the settings above; a caller's own choice is left alone."""
    if "SPARK_CONF_DIR" in os.environ or "SPARK_SUBMIT_OPTS" in os.environ:
        return
    conf = conf_dir()
    os.environ["SPARK_CONF_DIR"] = str(conf)
    os.environ["SPARK_SUBMIT_OPTS"] = submit_opts(driver_archive(conf))


if __name__ == "__main__":  # scripts/test.sh: make the archive while the stack starts
    print(f"CDS archive for the tests' Spark drivers: {driver_archive(conf_dir())}")
