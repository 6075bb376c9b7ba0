"""``job:``: the Spark side of ``leakproof run`` (batch clock, master, stop timeout, the
metrics endpoint, extra Spark settings, the rows a Python worker keeps between batches)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leakproof.core.config.reader import Section
from leakproof.core.errors import ConfigError


@dataclass(frozen=True)
class JobConfig:
    """The Spark side: batch clock and master for ``leakproof run``."""

    batch_interval_s: float = 2.0
    master: str = "local[2]"
    app_name: str = "leakproof"
    # A stop (SIGTERM, SIGINT, `leakproof stop`) lets the batch in flight finish and commit for
    # at most this long; a batch still running then is abandoned uncommitted (exit 0 all the
    # same: a restart replays it). Keep it under the supervisor's kill timeout.
    stop_timeout_s: float = 30.0
    metrics_port: int = 0  # > 0: Prometheus metrics at http://<metrics_host>:<port>/metrics
    metrics_host: str = "127.0.0.1"
    # a Prometheus file-based service-discovery target for the endpoint, written at start and
    # removed at the end (the driver moves with every YARN attempt); null: none
    metrics_sd_file: str | None = None
    # extra Spark settings for `leakproof run` (spark-submit's --conf wins), e.g.
    # {"spark.ui.port": "4050"} (the UI is on unless {"spark.ui.enabled": "false"})
    spark_conf: dict[str, str] = field(default_factory=dict)
    # the session rows one Python worker keeps between batches, at most (about 400 bytes
    # each; the least recently used go first): a session touched again is then not read
    # from HBase. Size it to the open sessions of a worker's partitions; 0: none kept
    kept_rows: int = 50_000


def read_job(data: dict[str, Any]) -> JobConfig:
    s = Section(data, "job", JobConfig)
    interval = s.number("batch_interval_s", minimum=0, exclusive=True)
    if round(interval * 1000) < 1:
        raise ConfigError(f"'job.batch_interval_s' must be at least 0.001, got {interval}")
    port = s.number("metrics_port", minimum=0, integer=True)
    if port > 65535:
        raise ConfigError(f"'job.metrics_port' must be 0 (off) or a TCP port <= 65535, "
                          f"got {port}")
    sd_file = s.text("metrics_sd_file", optional=True)
    if sd_file is not None and not port:
        raise ConfigError("'job.metrics_sd_file' names the endpoint of 'job.metrics_port', "
                          "which is 0 (off): set a port, or metrics_sd_file: null")
    spark_conf = data.get("spark_conf") or {}
    if not isinstance(spark_conf, dict) or not all(
            isinstance(k, str) and k.startswith("spark.") for k in spark_conf):
        raise ConfigError(f"'job.spark_conf' must map spark.* keys to values, got {spark_conf!r}")
    return JobConfig(batch_interval_s=interval, master=s.text("master"),
                     stop_timeout_s=s.number("stop_timeout_s", minimum=0, exclusive=True),
                     spark_conf={k: str(v).lower() if isinstance(v, bool) else str(v)
                                 for k, v in spark_conf.items()},
                     app_name=s.text("app_name"), metrics_port=port,
                     metrics_host=s.text("metrics_host"),
                     metrics_sd_file=sd_file,
                     kept_rows=s.number("kept_rows", minimum=0, integer=True))
