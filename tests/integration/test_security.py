"""Security settings reach every Kafka client; secrets never reach logs or errors.

The stack's broker has a second listener, 127.0.0.1:9094, that accepts only TLS with
SASL/PLAIN inside (SASL_SSL, services/kafka/server.properties). A client that lost the
settings on the way (an executor's reader, the driver's admin client, the group mirror, the
producer) cannot talk to it at all, so a job that finishes exactly against it proves the SSL
and SASL settings arrived everywhere.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

import stack as stack_script
from leakproof.commands.produce import send_events
from leakproof.core.config import load
from leakproof.kafka import producer_settings, reader
from leakproof.kafka.admin import admin_settings
from leakproof.testing.generator import GeneratorSpec, generate

from .helpers import (
    Env,
    assert_offsets_chain,
    offsets_rows,
    require_standalone,
    standalone_submit,
)

pytestmark = pytest.mark.integration

CANARY = stack_script.KAFKA_SASL_PASSWORD  # the broker's test password doubles as the canary
SASL_SERVERS = f"127.0.0.1:{stack_script.KAFKA_SASL_PORT}"


def sasl(password: str = CANARY) -> dict[str, object]:
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(stack_script.KAFKA_CA_PEM),
            "ssl_check_hostname": True, "sasl_mechanism": "PLAIN",
            "sasl_plain_username": stack_script.KAFKA_SASL_USER,
            "sasl_plain_password": password}


@pytest.mark.parametrize("lacking", ["everything", "tls", "sasl"])
def test_the_listener_refuses_clients_without_the_settings(env: Env, lacking: str) -> None:
    """The premise of the test below: settings that do not arrive make the client fail."""
    partial = {"everything": {},
               "tls": {**sasl(), "security_protocol": "SASL_PLAINTEXT"},
               "sasl": {"security_protocol": "SSL", "ssl_cafile": str(stack_script.KAFKA_CA_PEM)},
               }[lacking]
    cut = load(env.variant("partial", kafka={"bootstrap_servers": SASL_SERVERS,
                                             "consumer": partial}))
    with pytest.raises(KafkaError):
        KafkaAdminClient(**{**admin_settings(cut.kafka), "request_timeout_ms": 5000,
                            "bootstrap_timeout_ms": 5000}).describe_topics([env.name])


def test_settings_reach_each_kind_of_client(env: Env) -> None:
    secure = load(env.variant("secure", kafka={"bootstrap_servers": SASL_SERVERS,
                                               "consumer": sasl()}))
    admin = KafkaAdminClient(**admin_settings(secure.kafka))
    try:
        assert admin.describe_topics([env.name])[0]["error_code"] == 0
    finally:
        admin.close()
    assert producer_settings(secure.kafka)["sasl_plain_password"] == CANARY
    consumer = reader._consumer(secure.kafka, env.name, 0)
    try:
        assert consumer.config["security_protocol"] == "SASL_SSL"
        assert consumer.config["ssl_cafile"] == str(stack_script.KAFKA_CA_PEM)
        assert consumer.config["group_id"] is None
        assert consumer.config["enable_auto_commit"] is False
    finally:
        reader.drop_consumer(secure.kafka, env.name, 0)


@pytest.mark.cluster
@pytest.mark.xdist_group("cluster")
def test_job_over_sasl_ssl_on_the_standalone_cluster_is_exact_and_never_logs_the_secret(
        env: Env) -> None:
    """Producer, driver, executors and the group mirror all over SASL_SSL; then every output --
    the driver's, each executor's stderr and stdout, and a failed start's error -- is
    searched for the password."""
    require_standalone()
    path = env.variant("secure", kafka={"bootstrap_servers": SASL_SERVERS, "consumer": sasl()})
    cfg = load(path)
    spec = GeneratorSpec(seed=1200, events=8_000, sessions=800)
    send_events(cfg.kafka, env.name, generate(spec))
    work = stack_script.RUN / "spark"
    apps_before = {p.name for p in work.glob("worker*/app-*")}
    ok = subprocess.run(standalone_submit(path, "--until-idle", "4"), capture_output=True,
                        text=True, timeout=300, check=False)
    (env.tmp / "spark-submit.log").write_text(ok.stdout + ok.stderr)
    assert ok.returncode == 0, ok.stderr[-5000:]
    env.verify(spec)
    assert_offsets_chain(env)
    assert offsets_rows(env)

    # the mirror reached the group over SASL_SSL too
    admin = KafkaAdminClient(**admin_settings(cfg.kafka))
    try:
        group = admin.list_group_offsets({"it": None})["it"]
        assert sum(o.offset for tp, o in group.items() if tp.topic == env.name) > 0
    finally:
        admin.close()

    apps = {p.name for p in work.glob("worker*/app-*")} - apps_before
    executor_logs = sorted(p for app in apps for p in work.glob(f"worker*/{app}/*/std*"))
    assert executor_logs, f"no executor logs under {work} for {apps}"

    # a wrong password: a clear error that names the failure, not the password
    wrong = env.variant("wrong", kafka={"bootstrap_servers": SASL_SERVERS,
                                        "consumer": sasl("wrong-" + CANARY)})
    failed = env.run(config=wrong, check=False)
    assert failed.returncode == 1, failed.stderr[-3000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("leakproof: Kafka at 127.0.0.1:9094 accepts connections but "
                           "refused the client"), last
    assert "sasl_mechanism PLAIN, user leakproof" in last, last

    shown = subprocess.run([sys.executable, "-c", "import sys; from leakproof.core.config import "
                            "load; print(load(sys.argv[1]))", path],
                           capture_output=True, text=True, check=True)
    texts = {"spark-submit stdout": ok.stdout, "spark-submit stderr": ok.stderr,
             "failed start": failed.stdout + failed.stderr, "config str": shown.stdout,
             "config repr": repr(load(path))}
    texts.update({str(p): p.read_text(errors="replace") for p in executor_logs})
    leaked = [name for name, text in texts.items() if CANARY in text]
    assert not leaked, leaked
