"""What a run is asked to do, read once from the environment: the topic's shape (EVENTS,
SESSIONS, SPAN_S, MANY, PARTITIONS), the ceiling's processes (WORKERS), the model and its
format (MODEL, FORMAT), null keys re-keyed by the job (REKEY), the peers (PEERS,
PEERS_FIRST), the profile's window (PROFILE_S), the latency mode's producer and warm-up
(PRODUCER, WARMUP_S), and the repository root and the local region server's log every part
reads or writes under."""

from __future__ import annotations

import os
from pathlib import Path

from leakproof.testing.generator import GeneratorSpec

ROOT = Path(__file__).resolve().parent.parent.parent
HBASE_LOG = ROOT / ".services" / "hbase" / "logs" / "hbase.out"  # the local stack's region server
EVENTS = int(os.environ.get("EVENTS", "1000000"))
# MANY=1: the many-concurrent-sessions topic (494 000 events, 130 000 sessions all starting
# within one hour of event time); SESSIONS and SPAN_S set them one by one
_MANY = os.environ.get("MANY") == "1"
if _MANY:
    EVENTS = int(os.environ.get("EVENTS", "494000"))
SESSIONS = int(os.environ.get("SESSIONS") or (130_000 if _MANY else EVENTS // 10))
SPAN_S = int(os.environ.get("SPAN_S") or (3600 if _MANY else 0)) or None
SPEC = GeneratorSpec(7, EVENTS, SESSIONS, span_s=SPAN_S)
PARTITIONS = int(os.environ.get("PARTITIONS", "4"))
WORKERS = int(os.environ.get("WORKERS", "2"))
# only a run of make bench's own load records its maximum for the latency mode (a wide,
# capped or many-sessions run's rate is no maximum of the 4-partition topic)
MAKE_BENCH_SHAPE = not any(os.environ.get(k) for k in (
    "EVENTS", "SESSIONS", "SPAN_S", "MANY", "PARTITIONS", "RATE_PER_PARTITION", "MODEL",
    "FORMAT", "CLOSED", "ISOLATION", "KEPT_ROWS"))
RESULT_JSON = os.environ.get("RESULT_JSON")  # also write the figures there, as JSON
PROFILE_S = int(os.environ.get("PROFILE_S", "12"))  # py-spy window on the job's workers
# the peer's variants: decode in the JVM / in mapInPandas; capped batches / one batch
PEERS = os.environ.get("PEERS", "jvm,jvm-one-batch,pandas").split(",")
PEERS_FIRST = os.environ.get("PEERS_FIRST") == "1"
# the latency mode's load: Kafka's Java client (jvm) or kafka-python in this process (python)
PRODUCER = os.environ.get("PRODUCER", "jvm")
WARMUP_S = float(os.environ.get("WARMUP_S", "30"))  # the latency mode's start-up, also shown apart
# MODEL=access: the proxy access-log example (a foreign schema, 13 aggregates with where
# filters and a Python aggregate) in place of the web model; no peers (theirs is the web
# fold). FORMAT=json: its records as JSON objects.
ACCESS = os.environ.get("MODEL") == "access"
ACCESS_JSON = ACCESS and os.environ.get("FORMAT") == "json"  # the same records as JSON
# FORMAT=confluent (web model): the events registry-framed, the schema in the stack's registry
FRAMED = not ACCESS and os.environ.get("FORMAT") == "confluent"
REGISTRY_URL = "http://127.0.0.1:8081/apis/ccompat/v7"
if ACCESS or FRAMED:  # the peers read bare web events only
    PEERS = []
if ACCESS:
    PEERS = []
# REKEY=1: the same web events under null keys (as log shippers send them), re-keyed by the
# job through its internal topic (input.rekey); no peers (they read keyed records)
REKEY = os.environ.get("REKEY") == "1"
if REKEY:
    PEERS = []
# MODEL=gap: the same web events with sessions.by: gap (each session id a visitor, its
# events split by the gap); the peer is Spark's session_window on the same topic
GAP = os.environ.get("MODEL") == "gap"
if GAP:
    PEERS = os.environ.get("PEERS", "session-window").split(",")
