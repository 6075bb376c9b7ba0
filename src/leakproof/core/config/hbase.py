"""``hbase:``: how the Thrift1 server is reached (transport, protocol, login, TLS) and the
table names, behind ``table_prefix``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from leakproof.core.config.reader import NAME_RE, Section
from leakproof.core.config.security import KerberosConfig
from leakproof.core.errors import ConfigError

ThriftTransport = Literal["buffered", "framed", "http"]
ThriftProtocol = Literal["binary", "compact"]
HBaseAuth = Literal["none", "kerberos"]
SaslQop = Literal["auth", "auth-int", "auth-conf"]


@dataclass(frozen=True)
class HBaseConfig:
    """How to reach the HBase Thrift1 server, and the table names (behind ``table_prefix``)."""

    host: str = "127.0.0.1"
    port: int = 9090
    # ``http``: Thrift over HTTP (the server's hbase.regionserver.thrift.http), the only
    # Thrift1 transport HBase can serve over TLS (hbase.thrift.ssl.enabled).
    transport: ThriftTransport = "buffered"
    protocol: ThriftProtocol = "binary"
    # ``kerberos``: log in as security.kerberos.principal. Over ``buffered`` that is SASL/GSSAPI
    # (the server's hbase.thrift.security.qop); over ``http`` it is SPNEGO.
    auth: HBaseAuth = "none"
    sasl_qop: SaslQop = "auth-conf"  # the least accepted
    # The Thrift server's principal; None: hbase/<host> (buffered) or HTTP/<host> (http),
    # in the realm of security.kerberos.principal.
    service_principal: str | None = None
    tls: bool = False  # https; only with transport: http
    tls_ca_file: str | None = None  # None: the system's trusted CAs
    table_prefix: str | None = None
    timeout_ms: int = 60000
    # How long an HBase outage is ridden out (calls retried with backoff, later batches queue
    # behind the waiting one) before the batch fails and the job stops; 0 = fail at once.
    outage_tolerance_s: float = 120.0
    offsets_ttl_days: float = 30.0  # TTL of the offsets table's rows when it is created; 0 = none
    sessions_table: str = "web_sessions"
    dead_letter_table: str = "web_events_dead_letter"
    offsets_table: str = "stream_kafka_offsets"
    state_table: str = "leakproof_state"
    kerberos: KerberosConfig | None = field(default=None, repr=False, compare=False)

    def kerberos_service(self) -> str:
        """The Thrift server's full principal name (``service/host@REALM``)."""
        assert self.kerberos is not None
        name = self.service_principal or (
            f"{'HTTP' if self.transport == 'http' else 'hbase'}/{self.host.lower()}")
        return name if "@" in name else f"{name}@{self.kerberos.realm}"

    def full_name(self, table: str) -> str:
        """The name HBase knows: happybase joins prefix and name with ``_``."""
        return f"{self.table_prefix}_{table}" if self.table_prefix else table


_TABLES = ("sessions_table", "dead_letter_table", "offsets_table", "state_table")


def read_hbase(data: dict[str, Any]) -> HBaseConfig:
    s = Section(data, "hbase", HBaseConfig)
    names = {k: s.text(k, pattern=NAME_RE) for k in _TABLES}
    if len(set(names.values())) != len(names):
        raise ConfigError(f"'hbase.*_table' names must differ, got {names}")
    transport = s.choice("transport", ThriftTransport)
    auth = s.choice("auth", HBaseAuth)
    tls = s.flag("tls")
    if auth == "kerberos" and transport == "framed":
        raise ConfigError("'hbase.auth' kerberos needs 'hbase.transport' buffered (SASL) or "
                          "http (SPNEGO): HBase's Thrift server refuses SASL over framed")
    if tls and transport != "http":
        raise ConfigError("'hbase.tls' needs 'hbase.transport' http: HBase's Thrift1 server "
                          "serves TLS only in HTTP mode (hbase.thrift.ssl.enabled)")
    return HBaseConfig(
        host=s.text("host"),
        port=s.number("port", minimum=1, integer=True),
        transport=transport,
        protocol=s.choice("protocol", ThriftProtocol),
        auth=auth,
        sasl_qop=s.choice("sasl_qop", SaslQop),
        service_principal=s.text("service_principal", optional=True),
        tls=tls,
        tls_ca_file=s.text("tls_ca_file", optional=True),
        table_prefix=s.text("table_prefix", pattern=NAME_RE, optional=True),
        timeout_ms=s.number("timeout_ms", minimum=1, integer=True),
        outage_tolerance_s=s.number("outage_tolerance_s", minimum=0),
        offsets_ttl_days=s.number("offsets_ttl_days", minimum=0),
        **names,
    )
