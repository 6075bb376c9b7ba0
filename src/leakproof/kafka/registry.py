"""A schema registry -- Confluent's API (and compatible ones: Apicurio's ``ccompat``) or
Cloudera's -- over the standard library's HTTP client.

The maintained Python clients either pin old HTTP stacks or pull in librdkafka (and a source
build for Kerberos); leakproof needs a handful of calls (the schema a frame names, a subject's
latest schema, register a schema, list subjects), so it makes them with ``urllib``: basic auth
or SPNEGO (a fresh Negotiate token per call, from the job's keytab login), a CA file for TLS,
a timeout per call.

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
import uuid
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from leakproof.core.codec import Decoder
from leakproof.core.config import Config, InputConfig, Registry
from leakproof.core.errors import ConfigError, RegistryRefused, RegistryUnavailable
from leakproof.core.frames import confluent_frame
from leakproof.model.spec import FROM_REGISTRY, Model, with_schema
from leakproof.security import kerberos

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
        """The schema registered under Confluent id ``schema_id``, or None if there is none."""
        return self.schema_of(confluent_frame(schema_id))

    def schema_of(self, frame: bytes) -> str | None:
        """The schema (JSON text) a frame (``leakproof.core.frames``) names, or None if the
        registry has none."""
        magic, ident = frame[0], frame[1:]
        if self._cfg.api == "confluent":
            path = (f"/schemas/guids/{uuid.UUID(bytes=ident)}" if magic == 1
                    else f"/schemas/ids/{int.from_bytes(ident, 'big')}")
            found = self._call("GET", path, not_found_ok=True)
            return None if found is None else str(found["schema"])
        if magic == 1:  # Cloudera: schema metadata id + version number
            meta = self._call("GET", f"/schemaregistry/schemasById/"
                                     f"{int.from_bytes(ident[:8], 'big')}", not_found_ok=True)
            if meta is None:
                return None
            name = quote(str(meta["schemaMetadata"]["name"]), safe="")
            path = f"/schemaregistry/schemas/{name}/versions/{int.from_bytes(ident[8:], 'big')}"
        else:  # Cloudera: a schema version id, as an int or a long
            path = f"/schemaregistry/schemas/versionsById/{int.from_bytes(ident, 'big')}"
        found = self._call("GET", path, not_found_ok=True)
        return None if found is None else str(found["schemaText"])

    def latest(self, subject: str) -> str | None:
        """The latest schema registered under ``subject`` (Cloudera: the schema named so),
        or None."""
        name = quote(subject, safe="")
        if self._cfg.api == "cloudera":
            found = self._call("GET", f"/schemaregistry/schemas/{name}/versions/latest",
                               not_found_ok=True)
            return None if found is None else str(found["schemaText"])
        found = self._call("GET", f"/subjects/{name}/versions/latest", not_found_ok=True)
        return None if found is None else str(found["schema"])

    @property
    def _list_path(self) -> str:
        """Where the API lists its schemas: the cheapest call that needs credentials."""
        return "/schemaregistry/schemas" if self._cfg.api == "cloudera" else "/subjects"

    def subjects(self) -> list[str]:
        """The registered subjects."""
        found = self._call("GET", self._list_path)
        if self._cfg.api == "cloudera":
            return [str(e["schemaMetadata"]["name"]) for e in (found or {}).get("entities", [])]
        return [str(s) for s in found or []]

    def check_at_start(self) -> None:
        """One call, made by the job at start: refused credentials stop it now (exit 1,
        naming the registry); a registry that does not answer only gets a warning, since
        the ranges ride an outage out."""
        try:
            self._once("GET", self._list_path, None)
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
        """Register ``schema_text`` under ``subject`` (idempotent); its id. Two workers
        registering the same new subject at once: the registry may answer the second 409;
        then the schema is looked up under the subject, where the first one put it."""
        path = f"/subjects/{quote(subject, safe='')}"
        found = self._call("POST", f"{path}/versions", body={"schema": schema_text},
                           conflict_ok=True)
        if found is None:  # 409: look it up where the other registration put it
            found = self._call("POST", path, body={"schema": schema_text}, not_found_ok=True)
            if found is None:
                raise RegistryRefused(f"schema registry {self.where}: the schema is not "
                                      f"compatible with subject {subject} (HTTP 409)")
        assert found is not None
        return int(found["id"])

    def _call(self, method: str, path: str, body: Any = None, not_found_ok: bool = False,
              conflict_ok: bool = False) -> Any:
        """The answer, retried through an outage; None for a 404 (``not_found_ok``) or a 409
        (``conflict_ok``)."""
        deadline = time.monotonic() + self._cfg.outage_tolerance_s
        delay, tries = 0.5, 0
        while True:
            tries += 1
            try:
                return self._once(method, path, body)
            except urllib.error.HTTPError as exc:
                if (exc.code == 404 and not_found_ok) or (exc.code == 409 and conflict_ok):
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

    def _negotiate(self) -> str:
        """A fresh SPNEGO token for one call (the registry authenticates each request)."""
        assert self._cfg.kerberos is not None  # config.from_dict checked it
        service = self._cfg.kerberos_service()
        ctx = kerberos.context(self._cfg.kerberos, service, spnego=True)
        gssapi: Any = __import__("gssapi")
        try:
            token = ctx.step(None) or b""
        except gssapi.exceptions.GSSError as exc:
            raise kerberos.explain(exc, self._cfg.kerberos, f"the schema registry {service}") \
                from exc
        return "Negotiate " + base64.b64encode(token).decode()

    def _once(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self._cfg.url + path, data=data, method=method)
        req.add_header("Accept", CONTENT_TYPE)
        if data is not None:
            req.add_header("Content-Type", CONTENT_TYPE)
        if self._auth is not None:
            req.add_header("Authorization", self._auth)
        elif self._cfg.auth == "kerberos":
            req.add_header("Authorization", self._negotiate())
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


def resolve_schema(cfg: Config) -> Config:
    """``cfg`` with its reader schema, where ``events.schema`` was left out with
    ``events.format: confluent``: the latest schema of ``<topic>-value`` (Cloudera: the
    schema named after the topic), read once at start, so every record is resolved against
    the same reader and older writers' records decode too."""
    model = cfg.model
    if model.schema_file != FROM_REGISTRY:
        return cfg
    registry = cfg.input.registry
    assert registry is not None  # config: format confluent needs a registry
    reg = client(registry)
    subject = f"{cfg.kafka.topic}-value" if registry.api == "confluent" \
        else cfg.kafka.topic
    text = reg.latest(subject)
    if text is None:
        raise ConfigError(f"'events.schema' is not given, so the reader schema is the latest "
                          f"of {subject} in the schema registry {reg.where}, which has none; "
                          f"register the topic's schema, or give events.schema")
    return replace(cfg, model=with_schema(model, text, f"{subject} (the registry's latest "
                                                        f"at start)"))


def decoder_for(model: Model, cfg: InputConfig, *, key_checked: bool = True) -> Decoder:
    """The decoder of ``model`` with the ``input`` settings, looking writer schemas up in
    the input's registry when it has one (``key_checked``: ``codec.Decoder``)."""
    if cfg.registry is None:
        return Decoder(model, cfg.writer_schemas, cfg.max_ahead_ms, key_checked=key_checked)
    return Decoder(model, cfg.writer_schemas, cfg.max_ahead_ms,
                   client(cfg.registry).schema_of, cfg.registry.api, key_checked=key_checked)
