"""The schema registry (Apicurio, Confluent-compatible API): its process and the probe that
tells a registry still starting from one whose database will never work."""

from __future__ import annotations

from pathlib import Path

from stackparts.base import HOST, RUN
from stackparts.process import Service
from stackparts.readiness import WillNotStart

REGISTRY_PORT = 8081
REGISTRY_API = f"http://127.0.0.1:{REGISTRY_PORT}/apis/ccompat/v7"  # Confluent-compatible


def registry_service() -> Service:
    """Apicurio Registry: its Confluent API at REGISTRY_API. Its schemas are kept in an H2
    database file under ``registry/data`` (not the default in-memory one), so a registry
    stopped and started again still knows every id, as a production registry does."""
    runner = next((RUN / "registry" / "app").glob("*-runner.jar"), Path("runner.jar"))
    data = RUN / "registry" / "data" / "registry_db"
    return Service("registry", "registry", REGISTRY_PORT,
                   ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    f"-Dquarkus.http.port={REGISTRY_PORT}", f"-Dquarkus.http.host={HOST}",
                    f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{data}",
                    "-jar", str(runner)])


def registry_lacks_tables(status: int, log_text: str) -> bool:
    """Whether a registry answering ``status`` has a database without its tables: one stopped
    while it first made them leaves them half made, and then skips making them on every
    start, so no wait will help. ``log_text``: its log (appended over starts; only the lines
    since its last start count)."""
    since_start = log_text.rpartition("Listening on: ")[2]
    return status == 500 and "JdbcSQLSyntaxErrorException: Table" in since_start


def probe_registry() -> None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{REGISTRY_API}/subjects", timeout=5) as resp:
            if resp.status != 200:
                raise ConnectionError(f"registry answered {resp.status}")
    except urllib.error.HTTPError as exc:
        log_file = RUN / "registry" / "logs" / "registry.out"
        text = log_file.read_text(errors="replace") if log_file.exists() else ""
        if registry_lacks_tables(exc.code, text):
            raise WillNotStart(
                f"the registry's database {RUN / 'registry' / 'data'} lacks its tables (a "
                f"registry stopped part way through its first start; see {log_file}); "
                "`stack.py down --wipe` clears it with the rest of the stack's data") from exc
        raise
