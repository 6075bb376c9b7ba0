"""A Confluent-compatible schema registry, over the standard library's HTTP client.

The maintained Python clients either pin old HTTP stacks or pull in librdkafka; leakproof
needs three calls (a schema by id, register a schema, list subjects), so it makes them with
``urllib``: basic auth, a CA file for TLS, a timeout per call.

A registry that cannot be reached (refused, timed out, 5xx) is an outage, never a bad
record: ``schema`` retries (0.5 s doubling to 5 s) for ``outage_tolerance_s`` and then raises
RegistryUnavailable, which fails the range -- its batch is not committed and the job stops,
naming the registry -- so nothing is dead-lettered or skipped for it. An id the registry
answers "not found" for is the record's fault: ``schema`` returns None and the decoder makes
it a dead letter. Refused credentials raise RegistryRefused at once.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from leakproof.codec import Decoder
from leakproof.config import InputConfig
from leakproof.errors import RegistryRefused, RegistryUnavailable
from leakproof.model.spec import Model, Registry

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClient:
    """Calls on one registry. Nothing is cached here: the decoder keeps each writer schema it
    parsed, by id (ids never change)."""

    def __init__(self, cfg: Registry) -> None:
        self._cfg = cfg
        self._context = ssl.create_default_context(cafile=cfg.ca_file) if cfg.ca_file else None
        self._auth = None
        if cfg.username is not None and cfg.password is not None:
            pair = f"{cfg.username}:{cfg.password}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode()

    @property
    def where(self) -> str:
        """The url without user info, for messages (never a secret)."""
        parts = urlsplit(self._cfg.url)
        host = parts.hostname or ""
        return urlunsplit(parts._replace(netloc=host if parts.port is None
                                         else f"{host}:{parts.port}"))

    def schema(self, schema_id: int) -> str | None:
        """The schema registered under ``schema_id`` (JSON text), or None if there is none."""
        found = self._call("GET", f"/schemas/ids/{schema_id}", not_found_ok=True)
        return None if found is None else str(found["schema"])

    def subjects(self) -> list[str]:
        """The registered subjects."""
        found = self._call("GET", "/subjects")
        return [str(s) for s in found or []]

    def check_at_start(self) -> None:
        """One call, made by the job at start: refused credentials stop it now (exit 1,
        naming the registry); a registry that does not answer only gets a warning, since
        the ranges ride an outage out."""
        try:
            self._once("GET", "/subjects", None)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise RegistryRefused(f"schema registry {self.where} refused the credentials "
                                      f"of events.registry (HTTP {exc.code})") from None
            log.warning("schema registry %s answered HTTP %d at start; the ranges will wait "
                        "for it", self.where, exc.code)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            log.warning("schema registry %s is not reachable at start (%s); the ranges will "
                        "wait for it up to events.registry.outage_tolerance_s", self.where,
                        getattr(exc, "reason", exc))

    def register(self, subject: str, schema_text: str) -> int:
        """Register ``schema_text`` under ``subject`` (idempotent); its id."""
        found = self._call("POST", f"/subjects/{quote(subject, safe='')}/versions",
                           body={"schema": schema_text})
        assert found is not None
        return int(found["id"])

    def _call(self, method: str, path: str, body: Any = None, not_found_ok: bool = False
              ) -> Any:
        deadline = time.monotonic() + self._cfg.outage_tolerance_s
        delay, tries = 0.5, 0
        while True:
            tries += 1
            try:
                return self._once(method, path, body)
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and not_found_ok:
                    return None
                if exc.code in (401, 403):
                    raise RegistryRefused(f"schema registry {self.where} refused the "
                                          f"credentials of events.registry (HTTP {exc.code})"
                                          ) from None
                if exc.code < 500:
                    raise RegistryRefused(f"schema registry {self.where}: {method} {path}: "
                                          f"HTTP {exc.code} {_text(exc)}") from None
                reason = f"HTTP {exc.code}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if time.monotonic() + delay > deadline:
                raise RegistryUnavailable(
                    f"schema registry {self.where} unreachable for "
                    f"{self._cfg.outage_tolerance_s:.0f}s (events.registry.outage_tolerance_s),"
                    f" {tries} tries: {reason}")
            log.warning("schema registry %s: %s %s failed (%s); retry in %.1fs", self.where,
                        method, path, reason, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _once(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self._cfg.url + path, data=data, method=method)
        req.add_header("Accept", CONTENT_TYPE)
        if data is not None:
            req.add_header("Content-Type", CONTENT_TYPE)
        if self._auth is not None:
            req.add_header("Authorization", self._auth)
        with urllib.request.urlopen(req, timeout=self._cfg.timeout_s,
                                    context=self._context) as resp:
            return json.loads(resp.read() or b"null")


def _text(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(300).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - only for the message
        return ""


_clients: dict[Registry, RegistryClient] = {}


def client(cfg: Registry) -> RegistryClient:
    """The process's client of ``cfg`` (its TLS context and credentials, made once)."""
    found = _clients.get(cfg)
    if found is None:
        found = _clients[cfg] = RegistryClient(cfg)
    return found


def decoder_for(model: Model, cfg: InputConfig) -> Decoder:
    """The decoder of ``model`` with the ``input`` settings, looking writer schemas up in
    the model's registry when it has one."""
    lookup = client(model.registry).schema if model.registry is not None else None
    return Decoder(model, cfg.writer_schemas, cfg.max_ahead_ms, lookup)
