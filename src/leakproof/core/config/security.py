"""``security.kerberos`` (the job's login) and the schema registries (``events.registry``,
``output.registry``), which may log in with it. A password never reaches a repr."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from leakproof.core.config.reader import Section, mapping, no_unknown_keys, one_of
from leakproof.core.errors import ConfigError
from leakproof.core.frames import Api

RegistryAuth = Literal["none", "basic", "kerberos"]


@dataclass(frozen=True)
class KerberosConfig:
    """The job's Kerberos identity: a principal and its keytab (never a ticket cache, so a job
    that runs for weeks logs in again by itself whenever its tickets expire)."""

    principal: str
    keytab: str  # absolute, or a file shipped with --files (found in the working directory)
    krb5_conf: str | None = None  # None: the system's (/etc/krb5.conf or $KRB5_CONFIG)

    @property
    def realm(self) -> str:
        return self.principal.rpartition("@")[2]


@dataclass(frozen=True)
class Registry:
    """A schema registry (``events.registry``): where writer schemas of ``events.format:
    confluent`` records are fetched. ``api`` is the registry's REST API and the frames its
    serializers write (``leakproof.core.frames``). The password never reaches a repr; the url is
    shown without any user info."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    outage_tolerance_s: float = 120.0
    timeout_s: float = 10.0
    api: Api = "confluent"
    auth: RegistryAuth = "none"
    service_principal: str | None = None  # SPNEGO's target; default HTTP/<url host>
    # From ``security.kerberos`` (the job's login), not a key of its own.
    kerberos: KerberosConfig | None = field(default=None, repr=False, compare=False)

    def kerberos_service(self) -> str:
        """The registry's full principal name for SPNEGO (``HTTP/host@REALM``)."""
        assert self.kerberos is not None
        name = self.service_principal or f"HTTP/{(urlsplit(self.url).hostname or '').lower()}"
        return name if "@" in name else f"{name}@{self.kerberos.realm}"


_PRINCIPAL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")


def read_security(data: dict[str, Any], base: Path) -> KerberosConfig | None:
    no_unknown_keys(data, "security", {"kerberos"})
    raw = data.get("kerberos")
    if raw is None:
        return None
    s = Section(mapping(raw, "security.kerberos"), "security.kerberos", KerberosConfig)
    principal = s.text("principal")
    if not _PRINCIPAL_RE.match(principal):
        raise ConfigError(f"'security.kerberos.principal' must be a full principal name "
                          f"(name@REALM or service/host@REALM), got {principal!r}")

    def path(name: str) -> str | None:
        value = s.text(name, optional=name == "krb5_conf")
        if value is None:
            return None
        found = base / value
        # A relative path that is not there now may be a file shipped with --files.
        return str(found.resolve()) if found.exists() else value

    keytab = path("keytab")
    assert keytab is not None
    return KerberosConfig(principal=principal, keytab=keytab, krb5_conf=path("krb5_conf"))


def events_registry(data: Any, fmt: str, base: Path) -> Registry | None:
    if fmt != "confluent":
        if data is not None:
            raise ConfigError("'events.registry' is only read with 'events.format: confluent'")
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("url"), str):
        raise ConfigError("'events.registry.url' is required with 'events.format: confluent' "
                          "(for example http://127.0.0.1:8081/apis/ccompat/v7)")
    return read_registry(data, "events.registry", base)


def read_registry(data: Mapping[str, Any], key: str, base: Path) -> Registry:
    """A registry's settings under ``key`` (``events.registry``, ``output.registry``)."""
    if not isinstance(data.get("url"), str):
        raise ConfigError(f"'{key}.url' is required (for example "
                          f"http://127.0.0.1:8081/apis/ccompat/v7)")
    no_unknown_keys(data, key, {"url", "username", "password", "ca_file", "outage_tolerance_s",
                                "timeout_s", "api", "auth", "service_principal"})
    url = data["url"].rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"'{key}.url' must start with http:// or https://")
    if (data.get("username") is None) != (data.get("password") is None):
        raise ConfigError(f"'{key}.username' and '{key}.password' go together (HTTP "
                          f"basic auth)")
    api = one_of(data.get("api", "confluent"), f"{key}.api", Api)
    auth = one_of(data.get("auth", "basic" if data.get("username") is not None else "none"),
                  f"{key}.auth", RegistryAuth)
    if (auth == "basic") != (data.get("username") is not None):
        raise ConfigError(f"'{key}.auth' basic needs '{key}.username' and 'password', and "
                          f"they are read with basic only")
    principal = data.get("service_principal")
    if principal is not None and (auth != "kerberos" or not isinstance(principal, str)):
        raise ConfigError(f"'{key}.service_principal' is a principal name, read with "
                          f"'{key}.auth: kerberos' only")
    ca = data.get("ca_file")
    if ca is not None:
        ca = str(base / ca)
        if not Path(ca).is_file():
            raise ConfigError(f"'{key}.ca_file': no such file {ca}")
    numbers: dict[str, float] = {}
    for name, default in (("outage_tolerance_s", 120.0), ("timeout_s", 10.0)):
        value = data.get(name, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"'{key}.{name}' must be a number >= 0, got {value!r}")
        numbers[name] = float(value)
    return Registry(url, data.get("username"), data.get("password"), ca,
                    numbers["outage_tolerance_s"], numbers["timeout_s"], api=api, auth=auth,
                    service_principal=principal)


def with_login(registry: Registry, kerberos: KerberosConfig | None, key: str) -> Registry:
    """``registry`` with the job's login when it authenticates with Kerberos (SPNEGO)."""
    if registry.auth != "kerberos":
        return registry
    if kerberos is None:
        raise ConfigError(f"'{key}.auth' kerberos needs 'security.kerberos' (principal and "
                          f"keytab)")
    return replace(registry, kerberos=kerberos)
