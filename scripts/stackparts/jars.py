"""Each service's jars, resolved from Maven Central by ``mvn`` into ``.services/<name>/lib``
once per pom version (the schema registry's distribution unpacked as well)."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from stackparts.base import RUN, SERVICES, StackError, log


def fetch(names: tuple[str, ...] = ("kafka", "hbase", "kafka-tools", "kdc", "registry")
          ) -> None:
    """Copy each service's runtime classpath out of Maven Central, once per pom version
    (the registry's is a distribution: unpacked into its ``app`` directory)."""
    for name in names:
        pom = SERVICES / name / "pom.xml"
        lib = RUN / name / "lib"
        stamp = RUN / name / "lib.stamp"
        digest = hashlib.sha256(pom.read_bytes()).hexdigest()
        if lib.is_dir() and stamp.is_file() and stamp.read_text() == digest:
            continue
        shutil.rmtree(lib, ignore_errors=True)
        lib.parent.mkdir(parents=True, exist_ok=True)
        log(f"fetching {name} jars from Maven Central (first run only)")
        started = time.monotonic()
        cmd = [
            "mvn", "-B", "-q", "-f", str(pom),
            "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={lib}",
        ]
        result = subprocess.run(cmd, check=False, capture_output=True, text=True)
        # Maven 3.8 prints colour codes even in batch mode; keep only the words.
        text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr).strip()
        if text:
            print(text, flush=True)
        if result.returncode != 0:
            raise StackError(f"maven could not resolve {pom}")
        size = sum(p.stat().st_size for p in lib.iterdir())
        log(f"{name}: {len(list(lib.iterdir()))} jars, {size / 2**20:.0f} MiB, "
            f"{time.monotonic() - started:.0f}s")
        if name == "registry":
            unpack_registry(lib)
        stamp.write_text(digest)
    hbase_lib = RUN / "hbase" / "lib"
    bad = [p.name for p in (hbase_lib.iterdir() if hbase_lib.is_dir() else ())
           if any(k in p.name for k in ("logback", "reload4j", "slf4j-log4j12"))]
    if bad:
        raise StackError(f"a second SLF4J binding leaked into the HBase classpath: {bad}")


def unpack_registry(lib: Path) -> None:
    """The registry's distribution (``*-all.tar.gz``) unpacked into ``registry/app``."""
    app = RUN / "registry" / "app"
    shutil.rmtree(app, ignore_errors=True)
    app.mkdir(parents=True)
    (tarball,) = lib.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        tar.extractall(app, filter="data")
