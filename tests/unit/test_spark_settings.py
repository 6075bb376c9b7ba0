"""Which Spark settings a run gets: spark-submit's, then config.yml's, then leakproof's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark import SparkConf

from leakproof.core import config
from leakproof.driver.spark_session import (
    JVM_JAVA_OPTIONS,
    apply_settings,
    defaults_file,
    file_settings,
    take_file_defaults,
)

ROOT = Path(__file__).resolve().parents[2]


def _config(spark_conf: dict[str, Any]) -> config.Config:
    data: dict[str, Any] = yaml.safe_load((ROOT / "config.yml").read_text())
    data["job"]["spark_conf"] = spark_conf
    return config.from_dict(data)


def _conf(**given: str) -> SparkConf:
    conf = SparkConf(loadDefaults=False)  # no JVM: a plain dict, as before the context
    for key, value in given.items():
        conf.set(key.replace("_", "."), value)
    return conf


def test_executors_and_the_driver_get_c1_only_and_the_ui_is_left_on() -> None:
    conf = _conf()
    apply_settings(conf, _config({}))
    assert conf.get("spark.executor.defaultJavaOptions") == JVM_JAVA_OPTIONS
    assert conf.get("spark.driver.defaultJavaOptions") == JVM_JAVA_OPTIONS
    assert conf.get("spark.driver.extraJavaOptions") is None  # the user's, untouched
    assert JVM_JAVA_OPTIONS == "-XX:TieredStopAtLevel=1"  # no GC flag: it could clash
    assert conf.get("spark.ui.enabled") is None  # Spark's own default: on
    assert conf.get("spark.streaming.concurrentJobs") == "1"
    assert conf.get("spark.executor.extraJavaOptions") is None  # the user's, untouched


def test_config_yml_wins_over_the_defaults() -> None:
    conf = _conf()
    apply_settings(conf, _config({"spark.executor.defaultJavaOptions": "-XX:+PrintFlagsFinal",
                                  "spark.ui.enabled": True}))
    assert conf.get("spark.executor.defaultJavaOptions") == "-XX:+PrintFlagsFinal"
    assert conf.get("spark.ui.enabled") == "true"


def test_spark_submit_wins_over_config_yml_and_the_defaults() -> None:
    conf = _conf(spark_executor_defaultJavaOptions="-Xss4m", spark_ui_enabled="true")
    apply_settings(conf, _config({"spark.ui.enabled": False}))
    assert conf.get("spark.executor.defaultJavaOptions") == "-Xss4m"
    assert conf.get("spark.ui.enabled") == "true"


def test_spark_defaults_conf_is_read_as_java_reads_a_properties_file() -> None:
    text = "\n".join([
        "# a comment \\",
        "spark.driver.defaultJavaOptions   -Djava.security.krb5.conf=/etc/krb5.conf \\",
        "    -XX:+ExitOnOutOfMemoryError",
        "  ! another comment",
        "spark.ui.port=4050",
        "spark.eventLog.dir : hdfs:///logs  ",
        "spark.executor.memory\t2g",
        "spark.flag",
        "hadoop.not.spark x",
        "",
    ])
    assert file_settings(text) == {
        "spark.driver.defaultJavaOptions":
            "-Djava.security.krb5.conf=/etc/krb5.conf -XX:+ExitOnOutOfMemoryError",
        "spark.ui.port": "4050",
        "spark.eventLog.dir": "hdfs:///logs",
        "spark.executor.memory": "2g",
        "spark.flag": "",
    }


def test_the_file_spark_submit_reads_is_found(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    assert defaults_file({}, lambda: str(tmp_path)) is None
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.a 1\n")
    assert defaults_file({}, lambda: str(tmp_path)) == tmp_path / "conf" / "spark-defaults.conf"
    assert defaults_file({"SPARK_HOME": str(tmp_path)}, lambda: "/nowhere") is not None
    assert defaults_file({"SPARK_CONF_DIR": str(tmp_path)}, lambda: str(tmp_path)) is None


def test_an_administrators_defaults_win_where_leakproof_starts_the_jvm(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "spark.driver.defaultJavaOptions -Djava.security.auth.login.config=/etc/jaas.conf\n"
        "spark.ui.enabled false\n")
    conf = _conf(spark_ui_enabled="true")  # given on the command line: wins over the file
    take_file_defaults(conf, {"SPARK_CONF_DIR": str(tmp_path)}, lambda: "/nowhere")
    apply_settings(conf, _config({"spark.driver.defaultJavaOptions": "-Xss4m"}))
    assert conf.get("spark.driver.defaultJavaOptions") == \
        "-Djava.security.auth.login.config=/etc/jaas.conf"
    assert conf.get("spark.ui.enabled") == "true"
    assert conf.get("spark.executor.defaultJavaOptions") == JVM_JAVA_OPTIONS


def test_a_spark_connect_session_is_refused_before_spark_starts() -> None:
    from leakproof.core.errors import ConfigError
    from leakproof.driver.spark_session import spark_connect_requested, spark_context

    assert spark_connect_requested({}, {}) is None
    assert spark_connect_requested({"SPARK_CONNECT_MODE_ENABLED": "1"}, {}) is not None
    assert spark_connect_requested({"SPARK_REMOTE": "sc://h:15002"}, {}) is not None
    assert spark_connect_requested({}, {"spark.api.mode": "connect"}) is not None
    assert spark_connect_requested({}, {"spark.api.mode": "classic"}) is None
    with pytest.raises(ConfigError, match="cannot run DStreams"):
        spark_context(_config({"spark.api.mode": "connect"}))  # refused before any JVM
