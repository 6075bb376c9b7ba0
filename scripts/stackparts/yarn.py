"""The YARN MiniCluster (``stack.py up --yarn`` / ``start yarn``) that spark-submit
``--master yarn`` runs against, and its ``yarn-site.xml``."""

from __future__ import annotations

import shutil
import time

from stackparts.base import HOST, ROOT, RUN, StackError, log
from stackparts.hbase import HBASE_JDK17_OPTS
from stackparts.jars import fetch
from stackparts.process import Service, port_open
from stackparts.readiness import wait_until

YARN_RM_PORT = 8032
YARN_CONF_DIR = RUN / "yarn" / "conf"  # HADOOP_CONF_DIR for spark-submit --master yarn


def yarn_service() -> Service:
    """A ResourceManager and one NodeManager in one JVM (Hadoop's MiniYARNCluster), no HDFS.

    ``services/yarn/MiniYarn.java`` runs as a single-file program. Once the NodeManager has
    registered it writes the cluster's configuration to ``YARN_CONF_DIR/yarn-site.xml``,
    which is what spark-submit reads through HADOOP_CONF_DIR. The file system is the local
    one, so Spark's staging directory and the NodeManager's localized files are plain
    directories. Every port is bound to 127.0.0.1 (the ``bind-host`` keys).
    """
    run = RUN / "yarn"
    settings = {
        "yarn.resourcemanager.hostname": HOST,
        "yarn.resourcemanager.address": f"{HOST}:{YARN_RM_PORT}",
        "yarn.resourcemanager.bind-host": HOST,
        "yarn.nodemanager.hostname": HOST,
        "yarn.nodemanager.bind-host": HOST,
        "yarn.nodemanager.resource.memory-mb": "6144",
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.pmem-check-enabled": "false",
        "yarn.resourcemanager.am.max-attempts": "4",
        "hadoop.tmp.dir": str(run / "tmp"),
    }
    return Service("yarn", "yarn", YARN_RM_PORT, [
        "java", "-Xmx768m", *HBASE_JDK17_OPTS, "-cp", f"{run / 'lib'}/*",
        str(ROOT / "services" / "yarn" / "MiniYarn.java"), str(YARN_CONF_DIR / "yarn-site.xml"),
        *[f"{k}={v}" for k, v in settings.items()],
    ])


def yarn_up() -> None:
    fetch(("yarn",))
    svc = yarn_service()
    t0 = time.monotonic()
    if svc.pid() is None:
        shutil.rmtree(YARN_CONF_DIR, ignore_errors=True)
        YARN_CONF_DIR.mkdir(parents=True)
    svc.start()
    conf = YARN_CONF_DIR / "yarn-site.xml"

    def written() -> None:
        if not conf.is_file() or not port_open(YARN_RM_PORT):
            raise StackError("not yet")

    wait_until(svc, "resourcemanager port and yarn-site.xml", written)
    log(f"yarn ready: HADOOP_CONF_DIR={YARN_CONF_DIR} ({time.monotonic() - t0:.1f}s)")
