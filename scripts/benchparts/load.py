"""The load a run puts on Kafka: the pre-fill of make bench's topic (web events, the same
registry-framed, or the access-log example's records) and the latency mode's paced
producer."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from benchparts.settings import (
    ACCESS,
    ACCESS_JSON,
    EVENTS,
    FRAMED,
    PARTITIONS,
    PRODUCER,
    REKEY,
    ROOT,
    SESSIONS,
    SPAN_S,
    SPEC,
)
from leakproof.commands.produce import send_confluent, send_events, send_raw
from leakproof.core import codec, config
from leakproof.examples import access_log
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import generate


def prefill(cfg: config.Config, name: str) -> None:
    """Create the topic ``name`` and fill it with the run's records: EVENTS web events in
    SESSIONS sessions (MANY, SPAN_S), the same registry-framed (FORMAT=confluent), or the
    access-log example's requests (MODEL=access, FORMAT=json); REKEY=1: the web events under
    null keys."""
    what = (f"about {EVENTS} access-log requests in {EVENTS // 12} visits" if ACCESS else
            f"{EVENTS} events, {SESSIONS} sessions"
            f"{f' starting within {SPAN_S} s' if SPAN_S else ''}")
    print(f"== pre-fill {what} into {name} ({PARTITIONS} partitions)", flush=True)
    create_topic(cfg.kafka, name, PARTITIONS)
    if ACCESS:
        encode = access_log.json_value if ACCESS_JSON else access_log.avro_value
        report = send_raw(cfg.kafka, name, ((r["visit"].encode(), encode(r))
                                            for r in access_log.requests(7, EVENTS // 12)))
    elif FRAMED:
        assert cfg.input.registry is not None
        report = send_confluent(cfg.kafka, name, generate(SPEC), cfg.input.registry)
    elif REKEY:  # null keys: the producer spreads them over the partitions
        report = send_raw(cfg.kafka, name, ((None, codec.encode_value(e))
                                            for e in generate(SPEC)))
    else:
        report = send_events(cfg.kafka, name, generate(SPEC))
    print(f"   produced in {report.seconds:.1f}s ({report.rate:.0f} ev/s)", flush=True)


class PacedProducer:
    """Sends pre-encoded records at a steady rate, from a process of its own: Kafka's Java
    client (scripts/PacedProducer.java, about a seventh of kafka-python's CPU a record), or with
    PRODUCER=python kafka-python in a thread of this one (what earlier runs used)."""

    def __init__(self, cfg: config.Config, topic: str, pairs: list[tuple[bytes, bytes]],
                 rate: float, work: Path) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        if PRODUCER == "python":
            self._thread = threading.Thread(
                target=send_raw, args=(cfg.kafka, topic, pairs, rate), daemon=True)
            self._thread.start()
            return
        records = work / f"pairs-{topic}.bin"
        with open(records, "wb") as out:
            for key, value in pairs:
                out.write(b"".join((len(key).to_bytes(4, "big"), key,
                                    len(value).to_bytes(4, "big"), value)))
        self._proc = subprocess.Popen(
            ["java", "-cp", str(ROOT / ".services" / "kafka" / "lib" / "*"),
             str(ROOT / "scripts" / "PacedProducer.java"), cfg.kafka.bootstrap_servers, topic,
             str(rate), str(records)])

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
        elif self._proc is not None and self._proc.wait() != 0:
            raise RuntimeError(f"the paced producer failed (exit {self._proc.returncode})")
