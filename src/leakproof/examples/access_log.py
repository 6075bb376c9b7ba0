"""A proxy access log from a seed (``access_log.avsc``): a schema that is not the web
event's -- timestamp-millis time, an enum, a double, a boolean, nullable fields -- with the
disorder real topics have: requests delivered late, requests sent twice, visits that log in
part way (``account`` null before)."""

from __future__ import annotations

import io
import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
import orjson
import yaml

from leakproof.model.schema import without_logical_types

DATA = Path(__file__).parent
SCHEMA = DATA / "access_log.avsc"
MODEL = DATA / "access_log.yml"
START = 1_767_225_600_000
PATHS = ("/", "/product", "/cart", "/pay", "/search", "/api/cart", "/api/pay", "/help")


def model_sections() -> dict[str, Any]:
    """``events`` and ``aggregates`` with the schema as an absolute path."""
    data: dict[str, Any] = yaml.safe_load(MODEL.read_text())
    data["events"]["schema"] = str(SCHEMA)
    return data


def requests(seed: int, visits: int, per_visit: int = 12, gap_ms: int = 600_000
             ) -> list[dict[str, Any]]:
    """Records in emission order: each visit's requests in time order, but 3 % delivered
    after the visit would have closed (late, or -- if still open -- out of order) and 1 %
    sent twice."""
    rng = random.Random(seed)
    out: list[tuple[int, int, dict[str, Any]]] = []
    for v in range(visits):
        visit = f"v{seed}-{v:05d}"
        at = START + rng.randrange(visits * 4_000)
        login = rng.choice([None, 0, 2, 5])
        agent = rng.choice([None, "curl/8", "Mozilla/5.0"])
        for n in range(rng.randrange(1, per_visit * 2)):
            at += rng.randrange(200, 40_000)
            rec = {"visit": visit, "at": at, "n": n,
                   "method": rng.choice(("GET", "GET", "GET", "POST", "PUT", "DELETE")),
                   "path": rng.choice(PATHS) if n else "/",
                   "code": rng.choice((200, 200, 200, 200, 304, 404, 429, 500, 503)),
                   "size": rng.randrange(0, 50_000),
                   "latency_ms": round(rng.expovariate(1 / 80), 3),
                   "cached": rng.random() < 0.2,
                   "account": f"acct-{v % 97}" if login is not None and n >= login else None,
                   "agent": agent}
            emit = at + (gap_ms * 2 if rng.random() < 0.03 else 0)
            out.append((emit, len(out), rec))
            if rng.random() < 0.01:
                out.append((emit + rng.randrange(1, 5_000), len(out), dict(rec)))
    return [rec for _, _, rec in sorted(out, key=lambda t: (t[0], t[1]))]


@cache
def _writer() -> Any:
    return fastavro.parse_schema(without_logical_types(json.loads(SCHEMA.read_text())))


def avro_value(rec: dict[str, Any]) -> bytes:
    """Schemaless Avro, as the proxy's producer writes it."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _writer(), rec)
    return out.getvalue()


def json_value(rec: dict[str, Any]) -> bytes:
    """As a log shipper writes it: null fields left out (the schema's default fills them)."""
    return orjson.dumps({k: v for k, v in rec.items() if v is not None})
