"""Kerberos (and TLS) to HBase's Thrift1 server, underneath happybase's API.

happybase opens a plain socket; it has no SASL. The two secured modes HBase's Thrift1 server
offers are built here and handed to happybase as its transport:

* ``buffered`` + Kerberos: Thrift's SASL framing (the server's TSaslServerTransport) with the
  GSSAPI mechanism of RFC 4752, at the server's ``hbase.thrift.security.qop``. thriftpy2
  ships the SASL framing (``TSaslClientTransport``); it asks a Cyrus-style client object
  for the mechanism's steps, and ``GssapiSasl`` is that object, written on python-gssapi.
* ``http`` (+ TLS): Thrift over HTTP(S) (the server's ``hbase.regionserver.thrift.http`` and
  ``hbase.thrift.ssl.enabled``), authenticated by SPNEGO: every request carries a fresh
  ``Authorization: Negotiate`` token, as HBase's Thrift servlet demands.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import struct
from io import BytesIO
from typing import Any

from thriftpy2.http import THttpClient, THttpHeaderFactory
from thriftpy2.protocol.binary import TBinaryProtocol
from thriftpy2.protocol.compact import TCompactProtocol
from thriftpy2.transport import TSocket, TTransportException
from thriftpy2.transport.sasl import TSaslClientTransport

try:  # the compiled twin, which thriftpy2's compiled protocols (happybase's) require
    from thriftpy2.transport.sasl import TCySaslClientTransport as _SaslTransport  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - thriftpy2 built without Cython
    _SaslTransport = TSaslClientTransport

from leakproof.core.config import HBaseConfig, KerberosConfig
from leakproof.core.errors import KerberosError
from leakproof.security import kerberos

# RFC 4752 security layers, as bits of the server's offer and of the client's choice.
QOP_BITS = {"auth": 1, "auth-int": 2, "auth-conf": 4}
MAX_BUFFER = 0xFFFFFF


class GssapiSasl:
    """SASL GSSAPI (RFC 4752) for thriftpy2's ``TSaslClientTransport``.

    The transport calls ``start``/``step`` during the handshake and ``encode``/``decode`` for
    every frame after it. Errors keep krb5's words and name the principal and the service.
    """

    def __init__(self, cfg: KerberosConfig, service: str, least_qop: str) -> None:
        import gssapi

        self._gssapi: Any = gssapi
        self._cfg = cfg
        self._service = service
        self._least = QOP_BITS[least_qop]
        flags = (gssapi.RequirementFlag.mutual_authentication
                 | gssapi.RequirementFlag.integrity | gssapi.RequirementFlag.confidentiality
                 | gssapi.RequirementFlag.out_of_sequence_detection)
        self._ctx = kerberos.context(cfg, service, flags=flags)
        self._chosen = 0
        self._error = ""

    @property
    def qop(self) -> str:
        return next((k for k, v in QOP_BITS.items() if v == self._chosen), "none")

    def start(self, mechanism: str) -> tuple[bool, str, bytes]:
        return True, "GSSAPI", self._step(None)

    def step(self, challenge: bytes) -> tuple[bool, bytes]:
        if not self._ctx.complete:
            return True, self._step(challenge) or b""
        return True, self._choose_layer(challenge)

    def _step(self, token: bytes | None) -> bytes:
        try:
            return self._ctx.step(token) or b""
        except self._gssapi.exceptions.GSSError as exc:
            raise kerberos.explain(exc, self._cfg, f"the HBase Thrift server {self._service}") \
                from exc

    def _choose_layer(self, challenge: bytes) -> bytes:
        """The server's last challenge offers security layers; take the strongest offered,
        refusing the handshake if that is weaker than ``hbase.sasl_qop``."""
        offer = self._ctx.unwrap(challenge).message
        if len(offer) != 4:
            raise TTransportException(message="malformed SASL GSSAPI security-layer offer")
        offered = offer[0]
        chosen = next((bit for bit in (4, 2, 1) if offered & bit), 0)
        if chosen < self._least:
            names = [k for k, v in QOP_BITS.items() if offered & v]
            raise KerberosError(
                f"the HBase Thrift server {self._service} offers SASL protection "
                f"{' '.join(names) or 'none'}, weaker than hbase.sasl_qop requires "
                f"({self.qop_name(self._least)}); set hbase.thrift.security.qop on the server "
                f"or lower hbase.sasl_qop")
        self._chosen = chosen
        authz = str(self._ctx.initiator_name).encode()
        reply = struct.pack(">I", (chosen << 24) | MAX_BUFFER) + authz
        return bytes(self._ctx.wrap(reply, False).message)

    @staticmethod
    def qop_name(bits: int) -> str:
        return next(k for k, v in QOP_BITS.items() if v == bits)

    def encode(self, data: bytes) -> tuple[bool, bytes]:
        if self._chosen == QOP_BITS["auth"]:
            return True, data  # the transport frames it as it is
        try:
            wrapped = self._ctx.wrap(data, self._chosen == QOP_BITS["auth-conf"])
        except self._gssapi.exceptions.GSSError as exc:  # e.g. the context expired
            self._error = str(kerberos.explain(exc, self._cfg, self._service))
            return False, b""
        return True, struct.pack(">I", len(wrapped.message)) + wrapped.message

    def decode(self, frame: bytes) -> tuple[bool, bytes]:
        try:
            return True, bytes(self._ctx.unwrap(frame[4:]).message)
        except self._gssapi.exceptions.GSSError as exc:
            self._error = str(kerberos.explain(exc, self._cfg, self._service))
            return False, b""

    def getError(self) -> str:  # noqa: N802 - the name thriftpy2's transport calls
        return self._error


class _Negotiate(THttpHeaderFactory):
    """A fresh SPNEGO token for every request: HBase's Thrift servlet authenticates each."""

    def __init__(self, cfg: KerberosConfig, service: str) -> None:
        super().__init__()
        self._cfg = cfg
        self._service = service

    def get_headers(self) -> dict[str, str]:
        gssapi: Any = __import__("gssapi")
        ctx = kerberos.context(self._cfg, self._service, spnego=True)
        try:
            token = ctx.step(None) or b""
        except gssapi.exceptions.GSSError as exc:
            raise kerberos.explain(exc, self._cfg, f"the HBase Thrift server {self._service}") \
                from exc
        return {"Authorization": "Negotiate " + base64.b64encode(token).decode()}


class HttpTransport(THttpClient):
    """Thrift over HTTP(S) on one kept-alive connection; a refusal becomes a clear error
    instead of an HTTP error page parsed as Thrift."""

    code: int
    message: str

    def __init__(self, cfg: HBaseConfig) -> None:
        scheme = "https" if cfg.tls else "http"
        headers = (_Negotiate(cfg.kerberos, cfg.kerberos_service())
                   if cfg.auth == "kerberos" and cfg.kerberos is not None else None)
        super().__init__(f"{scheme}://{cfg.host}:{cfg.port}/",  # timeout: see open
                         ssl_context_factory=(lambda: tls_context(cfg)) if cfg.tls else None,
                         http_header_factory=headers, keep_alive=True)
        self._cfg = cfg

    def open(self) -> None:
        super().open()
        conn = self._THttpClient__http  # type: ignore[attr-defined]
        conn.timeout = self._cfg.timeout_ms / 1000
        conn.connect()  # fail here, not at the first call, if the port or TLS is wrong

    def flush(self) -> None:
        """Send the buffered call and read its reply on this connection's own timeout.

        thriftpy2's ``flush`` sets the process-wide default socket timeout while it runs.
        In the driver that leaks into sockets other threads open meanwhile: a Py4J
        connection made then times out a Spark job that runs longer than the HBase timeout.
        So the request goes out here, through thriftpy2's undecorated sender; the
        connection's timeout is set in ``open``.
        """
        data = self._THttpClient__wbuf.getvalue()  # type: ignore[has-type]
        self._THttpClient__wbuf = BytesIO()
        if not data:
            return
        if not self.isOpen():
            self.open()
        send = self._THttpClient__send_request  # type: ignore[attr-defined]
        try:
            send(data)
        except (http.client.CannotSendRequest, http.client.RemoteDisconnected,
                BrokenPipeError, ConnectionResetError):
            # the server closed the kept-alive connection while it was idle: once more
            self.close()
            self.open()
            send(data)
        if self.code == 401 or self.code == 403:
            who = self._cfg.kerberos.principal if self._cfg.kerberos else "an anonymous client"
            raise KerberosError(
                f"the HBase Thrift server at {self._cfg.host}:{self._cfg.port} refused "
                f"{who} (HTTP {self.code} {self.message}); check hbase.auth and "
                f"hbase.service_principal ({self._service_name()})")
        if self.code != 200:
            raise TTransportException(
                message=f"HBase Thrift over HTTP answered {self.code} {self.message}")

    def _service_name(self) -> str:
        return self._cfg.kerberos_service() if self._cfg.kerberos else "-"


def tls_context(cfg: HBaseConfig) -> ssl.SSLContext:
    """Verify the server's certificate (against ``hbase.tls_ca_file`` if given) and name."""
    ctx = ssl.create_default_context(cafile=cfg.tls_ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def transport(cfg: HBaseConfig) -> Any:
    """The transport happybase should use for ``cfg``; None: happybase's own."""
    if cfg.transport == "http":
        return HttpTransport(cfg)
    if cfg.auth != "kerberos":
        return None
    assert cfg.kerberos is not None
    service = cfg.kerberos_service()
    kcfg = cfg.kerberos
    socket = TSocket(host=cfg.host, port=cfg.port,  # type: ignore[no-untyped-call]
                     socket_timeout=cfg.timeout_ms)
    return _SaslTransport(lambda: GssapiSasl(kcfg, service, cfg.sasl_qop), "GSSAPI", socket)


def protocol(cfg: HBaseConfig, transport: Any) -> Any:
    """The protocol over ``transport``: the pure-Python one where the transport is not a
    compiled thriftpy2 transport (HTTP), which the compiled protocols cannot drive."""
    if isinstance(transport, HttpTransport):
        cls = TCompactProtocol if cfg.protocol == "compact" else TBinaryProtocol
        return cls(transport, decode_response=False)
    return None
