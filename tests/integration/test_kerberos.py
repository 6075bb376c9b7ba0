"""The job on the secured stack: a real KDC (Apache Kerby), Kafka over SASL/GSSAPI, HBase's
Thrift server over SASL/GSSAPI at auth-conf and over HTTPS + SPNEGO (`stack.py secure-up`)."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import happybase
import pytest
import yaml
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from leakproof.core import config
from leakproof.core.config import Registry
from leakproof.core.errors import RegistryRefused
from leakproof.kafka.admin import create_topic
from leakproof.kafka.registry import RegistryClient
from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    ROOT,
    Env,
    lag_report,
    records,
    require_yarn,
    run_cli,
    standalone_submit,
    submit_yarn,
    wait_for,
)

pytestmark = [pytest.mark.integration]

FACTS = Path(os.environ.get("LEAKPROOF_STACK_DIR", ROOT / ".services")) / "secure" / "facts.json"
MODES = ("sasl", "https")
REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"


def facts() -> dict[str, Any]:
    if not FACTS.is_file():
        pytest.fail(f"the secured stack is not up ({FACTS} missing): "
                    "`.venv/bin/python scripts/stack.py secure-up`")
    return dict(json.loads(FACTS.read_text()))


def secure_config(name: str, mode: str) -> dict[str, Any]:
    """The job's config for the secured stack, as `stack.py secure-config` writes it."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "secure-config",
                          "--name", name, "--mode", mode], capture_output=True, text=True,
                         check=True)
    return dict(yaml.safe_load(out.stdout))


def make_env(mode: str, tmp: Path) -> Env:
    """A private topic (4 partitions) and tables on the secured stack, over ``mode``."""
    facts()
    name = f"krb{mode}{uuid.uuid4().hex[:6]}"
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "config.yml"
    path.write_text(yaml.safe_dump(secure_config(name, mode)))
    cfg = config.load(path)
    create_topic(cfg.kafka, name, 4)
    return Env(name, path, cfg, tmp)


@pytest.fixture(params=MODES)
def secure_env(request: pytest.FixtureRequest, tmp_path: Path) -> Env:
    return make_env(request.param, tmp_path)


def short_tickets(env: Env, lifetime: str) -> Path:
    """A krb5.conf like the stack's whose initial tickets live only ``lifetime``."""
    text = Path(facts()["krb5_conf"]).read_text()
    path = env.tmp / "krb5-short.conf"
    path.write_text(text.replace("ticket_lifetime = 24h", f"ticket_lifetime = {lifetime}"))
    assert f"ticket_lifetime = {lifetime}" in path.read_text()
    return path


@pytest.mark.cluster
@pytest.mark.xdist_group("cluster")
def test_exact_under_spark_submit_on_the_secured_stack(secure_env: Env) -> None:
    """spark-submit on the standalone cluster; the driver and both executors log in from the
    keytab; Kafka over GSSAPI, HBase over SASL auth-conf or HTTPS + SPNEGO."""
    spec = GeneratorSpec(seed=911, events=12_000, sessions=1_200)
    secure_env.produce(spec)
    cmd = standalone_submit(str(secure_env.path), "--until-idle", "5")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    (secure_env.tmp / "spark-submit.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    assert "on spark://127.0.0.1:7077" in out.stdout + out.stderr
    secure_env.verify(spec)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.xdist_group("cluster")
def test_exact_on_yarn_with_the_keytab_shipped_by_files(tmp_path: Path) -> None:
    """YARN cluster mode as the README's command runs it: the keytab, krb5.conf and config
    travel with --files and are named by file name; the driver (in the ApplicationMaster's
    container) and the executor find them in their working directories."""
    require_yarn()
    f = facts()
    env = make_env("sasl", tmp_path)
    spec = GeneratorSpec(seed=940, events=8_000, sessions=800)
    env.produce(spec)
    shipped = env.variant("shipped", security={"kerberos": {
        "principal": f["principal"], "keytab": Path(f["keytab"]).name,
        "krb5_conf": Path(f["krb5_conf"]).name}})
    with submit_yarn(env, "cluster", shipped, "yarn-kerberos", "--until-idle", "6",
                     files=(f["keytab"], f["krb5_conf"])) as job:
        rc = job.wait(timeout=420)
        text = job.text()
    assert rc == 0, text[-5000:]
    assert "final status: SUCCEEDED" in text, text[-3000:]
    env.verify(spec)


@pytest.mark.slow
def test_exact_across_several_ticket_expiries(tmp_path: Path) -> None:
    """Tickets of 15 s and runs of about a minute fed in waves, over SASL and over HTTPS side
    by side: every new connection and every SPNEGO request needs fresh tickets, which the job
    gets from the keytab by itself (it acquires again below 5 s left, krb5 at half-life)."""
    envs = [make_env(mode, tmp_path / mode) for mode in MODES]
    krb5 = short_tickets(envs[0], "15s")
    ccache = tmp_path / "probe.ccache"
    env = {**os.environ, "KRB5_CONFIG": str(krb5), "KRB5CCNAME": f"FILE:{ccache}"}
    f = facts()
    subprocess.run(["kinit", "-kt", f["keytab"], f["principal"]], env=env, check=True)
    klist = subprocess.run(["klist"], env=env, capture_output=True, text=True, check=True).stdout
    # the KDC really issues tickets that short under this krb5.conf
    cols = next(line.split() for line in klist.splitlines() if "krbtgt/" in line)
    start, end = (datetime.strptime(f"{d} {t}", "%m/%d/%y %H:%M:%S")
                  for d, t in (cols[0:2], cols[2:4]))
    assert 0 < (end - start).total_seconds() <= 15, klist
    configs = [e.variant("short", security={"kerberos": {
        "principal": f["principal"], "keytab": f["keytab"], "krb5_conf": str(krb5)}})
        for e in envs]
    waves = [GeneratorSpec(seed=920 + i, events=2_000, sessions=200,
                           start_ts=1_700_000_000_000 + i * 3_600_000) for i in range(3)]
    with contextlib.ExitStack() as jobs:
        running = [jobs.enter_context(e.background("--until-idle", "200", config=c))
                   for e, c in zip(envs, configs, strict=True)]
        for i, spec in enumerate(waves):  # waves 18 s apart: each after a further expiry
            if i:
                time.sleep(18)
            for e in envs:
                e.produce(spec)
        produced = records(*waves)
        for e, c in zip(envs, configs, strict=True):  # the last wave read and committed
            wait_for(f"{e.name}: every wave committed",
                     functools.partial(committed_all, e, c, produced), timeout=300)
        for job in running:
            job.signal_group(15)
        for job in running:
            assert job.wait(120) == 0, job.text()[-4000:]
    for e, c in zip(envs, configs, strict=True):
        e.verify(*waves, config=c)


def committed_all(env: Env, config: str, produced: int) -> bool:
    """Whether the job of ``config`` committed all ``produced`` records (its lag report,
    read through the secured services as an operator would)."""
    report = lag_report(env, config)
    return report["total_lag"] == 0 and sum(
        p["committed"] or 0 for p in report["partitions"]) >= produced


def test_secured_ports_refuse_clients_without_kerberos() -> None:
    f = facts()
    for port in (f["thrift_sasl_port"], f["thrift_https_port"]):
        conn = happybase.Connection("127.0.0.1", port, timeout=5000, autoconnect=False)
        with pytest.raises(Exception):  # noqa: B017 - any refusal will do; none may pass
            conn.open()
            conn.tables()
        conn.close()
    for server, protocol in ((f["kafka_sasl_plaintext"], "PLAINTEXT"),
                             (f["kafka_sasl_plaintext"], "SASL_PLAINTEXT")):
        settings: dict[str, Any] = {"bootstrap_servers": server, "security_protocol": protocol,
                                    "request_timeout_ms": 5000, "bootstrap_timeout_ms": 5000}
        if protocol == "SASL_PLAINTEXT":
            settings.update(sasl_mechanism="PLAIN", sasl_plain_username="leakproof",
                            sasl_plain_password="not-a-kerberos-login")
        with pytest.raises(KafkaError):
            KafkaAdminClient(**settings).describe_cluster()


@pytest.mark.parametrize("case", ["stale-keytab", "deleted-principal", "no-kerberos"])
def test_bad_credentials_stop_the_job_at_start_with_a_clear_message(
        tmp_path: Path, case: str) -> None:
    f = facts()
    name = f"krbbad{uuid.uuid4().hex[:6]}"
    data = secure_config(name, "sasl")
    if case == "stale-keytab":
        data["security"]["kerberos"]["keytab"] = f["stale_keytab"]
        expect = ["leakproof@LEAKPROOF.TEST", "keytab", "export it again", "logging in for"]
    elif case == "deleted-principal":
        data["security"]["kerberos"].update(principal=f["deleted_principal"],
                                            keytab=f["deleted_keytab"])
        expect = ["deleted@LEAKPROOF.TEST", "unknown to the KDC", "logging in for"]
    else:  # a client without Kerberos against the SASL Thrift port
        data["kafka"]["bootstrap_servers"] = "127.0.0.1:9092"
        data["kafka"].pop("consumer")
        data.pop("security")
        # the server waits for the rest of a "handshake" that never comes: the client's
        # timeout ends each try
        data["hbase"].update(auth="none", outage_tolerance_s=0, timeout_ms=5000)
        data["hbase"].pop("service_principal")
        data["hbase"].pop("sasl_qop")
        expect = [f"127.0.0.1:{f['thrift_sasl_port']}", "hbase.auth: kerberos"]
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(data))
    out = run_cli("run", "--config", str(path), "--until-idle", "2", check=False, timeout=120,
                  log=tmp_path / "run.log")
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    for words in expect:
        assert words in text, (words, text[-3000:])
    if case != "no-kerberos":
        assert "Kerberos authentication of" in text
        keytab = Path(data["security"]["kerberos"]["keytab"]).read_bytes()
        assert keytab.hex() not in text and keytab[-32:].hex() not in text


def skewed(*args: str, krb5_conf: Path | None = None, config_path: Path) -> \
        subprocess.CompletedProcess[str]:
    """``leakproof ARGS`` with this host's clock 20 minutes ahead of the KDC's (libfaketime;
    Kerby allows 5 minutes)."""
    if shutil.which("faketime") is None:
        pytest.fail("the clock-skew test needs Debian's faketime: `make system-deps`")
    return subprocess.run(["faketime", "-f", "+20m", sys.executable, "-m", "leakproof.cli",
                           *args, "--config", str(config_path)],
                          capture_output=True, text=True, timeout=180, check=False)


def test_clock_skew_stops_the_job_at_start_unless_krb5_may_correct_it(tmp_path: Path) -> None:
    """MIT krb5 corrects its clock from the KDC's reply by default (``kdc_timesync``); where
    a site turns that off, a skewed host must stop at start with the principal, the services
    and "synchronise the clocks", before any JVM starts."""
    name = f"krbskew{uuid.uuid4().hex[:6]}"
    data = secure_config(name, "sasl")
    strict = tmp_path / "krb5-strict.conf"
    strict.write_text(Path(facts()["krb5_conf"]).read_text().replace(
        "[libdefaults]\n", "[libdefaults]\n  kdc_timesync = 0\n"))
    assert "kdc_timesync = 0" in strict.read_text()
    data["security"]["kerberos"]["krb5_conf"] = str(strict)
    path = tmp_path / "strict.yml"
    path.write_text(yaml.safe_dump(data))
    out = skewed("run", "--until-idle", "2", config_path=path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    for words in ("leakproof@LEAKPROOF.TEST", "Clock skew too great", "synchronise the clocks",
                  "hbase/localhost@LEAKPROOF.TEST", f"Kafka at {facts()['kafka_sasl_plaintext']}"):
        assert words in text, (words, text[-3000:])
    assert "log4j" not in text  # refused before the Spark JVM was started

    # the stack's own krb5.conf keeps MIT's default: the same skewed host gets in
    lenient = tmp_path / "lenient.yml"
    lenient.write_text(yaml.safe_dump(secure_config(name, "sasl")))
    create_topic(config.load(lenient).kafka, name, 1)
    out = skewed("produce", "--events", "50", "--sessions", "5", "--seed", "7",
                 config_path=lenient)
    assert out.returncode == 0 and "produced 50 events" in out.stdout, out.stderr[-3000:]


class _SpnegoRegistry(BaseHTTPRequestHandler):
    """The local registry behind SPNEGO, as a Kerberized registry is: a request without a
    valid Negotiate token for HTTP/127.0.0.1 is answered 401; an accepted one is passed on
    to the real registry, and the client's principal noted."""

    acceptor: Any = None
    principals: ClassVar[list[str]] = []
    refused: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self._relay()

    def do_POST(self) -> None:
        self._relay()

    def _relay(self) -> None:
        import gssapi

        auth = self.headers.get("Authorization", "")
        try:
            ctx = gssapi.SecurityContext(creds=self.acceptor, usage="accept")
            ctx.step(base64.b64decode(auth.removeprefix("Negotiate ")))
            assert auth.startswith("Negotiate ") and ctx.complete
        except Exception as exc:  # noqa: BLE001 - any failure is a refusal
            self.refused.append(f"{type(exc).__name__}: {exc}")
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Negotiate")
            self.end_headers()
            return
        self.principals.append(str(ctx.initiator_name))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        req = urllib.request.Request(REGISTRY + self.path.removeprefix("/ccompat"), data=body,
                                     method=self.command)
        req.add_header("Content-Type", self.headers.get("Content-Type", "application/json"))
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, data = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, data = err.code, err.read()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_kerberized_registry_is_reached_over_spnego_and_the_job_is_exact(
        tmp_path: Path) -> None:
    """events.registry.auth: kerberos: the producer, the driver and the Python workers each
    send a fresh SPNEGO token from the job's keytab login; a client without one is refused."""
    import gssapi

    f = facts()
    os.environ["KRB5_CONFIG"] = f["krb5_conf"]
    http_keytab = str(Path(f["keytab"]).parent / "http.keytab")
    _SpnegoRegistry.acceptor = gssapi.Credentials(usage="accept",
                                                  store={"keytab": http_keytab})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SpnegoRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ccompat"
    try:
        env = make_env("sasl", tmp_path)
        web = yaml.safe_load((ROOT / "config.yml").read_text())
        framed = env.variant("spnego", events={
            "format": "confluent", "session_key": "session_id", "event_time": "ts",
            "sequence": "seq", "registry": {"url": url, "auth": "kerberos", "timeout_s": 5}},
            aggregates=web["aggregates"])
        spec = GeneratorSpec(seed=2890, events=3_000, sessions=300)
        run_cli("produce", "--config", framed, "--format", "confluent", "--events", "3000",
                "--sessions", "300", "--seed", "2890")
        env.run("--until-idle", "4", config=framed)
        env.verify(spec, config=framed)
        with pytest.raises(RegistryRefused, match="refused the credentials"):
            RegistryClient(Registry(url, timeout_s=5)).subjects()
    finally:
        server.shutdown()
    assert set(_SpnegoRegistry.principals) == {f["principal"]}
    assert len(_SpnegoRegistry.principals) >= 2  # the producer's register, a worker's fetch
