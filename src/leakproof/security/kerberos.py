"""The process's Kerberos login: a keytab, never a ticket cache.

Each process that talks to a secured service (the driver, every Python worker on every
executor) logs in once, from the keytab in ``security.kerberos``. The tickets live in a
per-process memory cache, and MIT krb5 gets new ones from the keytab whenever they run out
(its "client keytab" initiation), so a job that runs for weeks never needs ``kinit``.

Kafka (kafka-python's GSSAPI) uses the process's default credentials; the environment
variables set here point those at the same keytab and cache. HBase's Thrift transports use
the credentials object directly.

Errors name the principal, the keytab and the service, and never carry a key.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from leakproof.core.config import KerberosConfig
from leakproof.core.errors import ConfigError, KerberosError

log = logging.getLogger(__name__)

CCACHE = "MEMORY:leakproof"
# Credentials with less left than this are acquired again (krb5 then takes new tickets from
# the keytab: its client-keytab refresh starts at half their lifetime).
RENEW_WITHIN_S = 5
_lock = threading.Lock()
_logins: dict[KerberosConfig, Any] = {}


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as exc:  # the package or the system's libgssapi_krb5 is missing
        raise KerberosError(
            "Kerberos needs the Python package gssapi and the system's MIT Kerberos library "
            f"(Debian: libkrb5-dev to build it, libgssapi-krb5-2 to run it): {exc}") from exc
    return gssapi


def find_file(path: str, key: str) -> str:
    """``path`` as given, else its name in the working directory: where spark-submit's
    ``--files`` puts it for executors (YARN containers, standalone Python workers)."""
    for candidate in (Path(path), Path.cwd() / Path(path).name):
        if candidate.is_file():
            if not os.access(candidate, os.R_OK):
                raise ConfigError(f"'{key}': {candidate} is not readable by this user")
            return str(candidate.resolve())
    raise ConfigError(f"'{key}': no file {path} here, nor {Path(path).name} in {Path.cwd()} "
                      f"(on a cluster, ship it with spark-submit --files)")


def login(cfg: KerberosConfig, service: str = "a secured service") -> Any:
    """This process's ``gssapi.Credentials`` for ``cfg.principal`` from its keytab (made once
    per process; krb5 renews them from the keytab as they run out)."""
    with _lock:
        gssapi = _gssapi()
        creds = _logins.get(cfg)
        if creds is not None:
            try:  # SPNEGO does not refresh expired tickets by itself: acquire again then
                if creds.lifetime > RENEW_WITHIN_S:
                    return creds
            except gssapi.exceptions.GSSError:
                pass
        keytab = find_file(cfg.keytab, "security.kerberos.keytab")
        if cfg.krb5_conf is not None:
            os.environ["KRB5_CONFIG"] = find_file(cfg.krb5_conf, "security.kerberos.krb5_conf")
        # The defaults kafka-python's GSSAPI picks up: the same keytab, the same cache.
        os.environ["KRB5_CLIENT_KTNAME"] = keytab
        os.environ["KRB5CCNAME"] = CCACHE
        name = gssapi.Name(cfg.principal, gssapi.NameType.kerberos_principal)
        try:
            creds = gssapi.Credentials(name=name, usage="initiate",
                                       store={"client_keytab": keytab, "ccache": CCACHE})
            creds.inquire()  # makes krb5 ask the KDC now, so a bad login fails here
        except gssapi.exceptions.GSSError as exc:
            raise explain(exc, cfg, f"the KDC, logging in for {service}") from exc
        # once per process at INFO; the renewals (as often as the tickets' lifetime) quietly
        log.log(logging.DEBUG if cfg in _logins else logging.INFO,
                "Kerberos: logged in as %s from keytab %s", cfg.principal, keytab)
        _logins[cfg] = creds
        return creds


def context(cfg: KerberosConfig, service: str, *, spnego: bool = False,
            flags: int | None = None) -> Any:
    """A new ``gssapi.SecurityContext`` from ``cfg``'s login to ``service`` (a full
    principal name, so no host-name canonicalisation can change it)."""
    gssapi = _gssapi()
    creds = login(cfg, service)
    target = gssapi.Name(service, gssapi.NameType.kerberos_principal)
    mech = gssapi.Mechanism.from_sasl_name("SPNEGO") if spnego else gssapi.MechType.kerberos
    kwargs: dict[str, Any] = {"name": target, "creds": creds, "usage": "initiate", "mech": mech}
    if flags is not None:
        kwargs["flags"] = flags
    return gssapi.SecurityContext(**kwargs)


_STALE = ("the keytab's key does not match the KDC's: the keytab is stale or for another "
          "principal; export it again")
# What krb5 says -> what the operator should check. Matched on krb5's own words (MIT's and,
# for a wrong key, what Kerby and Active Directory answer instead of "preauthentication").
_HINTS = (
    ("not found in kerberos database", "the principal is unknown to the KDC: check the name, "
                                       "its realm, and that it was created"),
    ("preauthentication failed", _STALE),
    ("decrypt integrity check failed", _STALE),
    ("password incorrect", _STALE),
    ("clock skew too great", "this host's clock and the KDC's or the service's differ by more "
                             "than the allowed skew: synchronise the clocks (NTP)"),
    ("cannot contact any kdc", "no KDC answered: check the kdc lines for the realm in "
                               "krb5.conf and that the KDC is up"),
    ("cannot find kdc", "no KDC is configured for the realm: check krb5.conf"),
    ("no key table entry found", "the keytab has no key for this principal: check "
                                 "security.kerberos.principal against `klist -k` of the keytab"),
    ("key table file", "the keytab cannot be read"),
    ("ticket expired", "the tickets expired and could not be renewed from the keytab"),
)


def explain(exc: BaseException, cfg: KerberosConfig, service: str) -> KerberosError:
    """A KerberosError naming who tried to reach what, krb5's reason and what to check."""
    text = _message(exc)
    hint = next((h for words, h in _HINTS if words in text.lower()), None)
    return KerberosError(
        f"Kerberos authentication of {cfg.principal} (keytab {cfg.keytab}) to {service} "
        f"failed: {text}" + (f" -- {hint}" if hint else ""),
        transient="cannot contact any kdc" in text.lower())


def _message(exc: BaseException) -> str:
    gen = getattr(exc, "gen_message", None)
    if callable(gen):
        try:
            return " ".join(str(gen()).split())
        except Exception:  # noqa: BLE001 - fall back to the plain text
            pass
    return " ".join(str(exc).split())
