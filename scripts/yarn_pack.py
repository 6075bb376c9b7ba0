#!/usr/bin/env python3
"""make yarn-pack: the job's Python environment as one archive for ``--archives``.

Executors on YARN run on machines where leakproof is not installed, so its Python
environment travels with the application, the way Spark's docs show for venvs: a virtualenv
packed with venv-pack, unpacked by YARN into each container as ``./environment``.

The environment holds leakproof with its ``kerberos`` extra (not editable: an editable
install points back into this checkout) and its dependencies, at the versions in
constraints.txt, except pyspark itself: Spark ships its own ``pyspark.zip`` to every
container, and leaving pyspark out keeps the archive near 23 MiB instead of 450.

A packed venv keeps a link to the interpreter it was made from, so the cluster's nodes need
that Python at the same path (here: the same machine). On a real cluster, build it on a
machine like the nodes (same OS and Python path), or use a relocatable Python.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".services" / "yarn"
ARCHIVE = OUT / "leakproof-env.tar.gz"


def main() -> int:
    started = time.monotonic()
    env = OUT / "shipenv"
    shutil.rmtree(env, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the kerberos extra too: a job on a secured cluster logs in from every executor
    deps = [*project["dependencies"], *project["optional-dependencies"]["kerberos"]]
    subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"),
                    *[d for d in deps if not d.startswith("pyspark")]], check=True)
    subprocess.run([*pip, "--no-deps", str(ROOT)], check=True)
    # the native read path (an abi3 wheel, built where cargo is): without it the executors
    # read with the pure-Python path, the same results, with a line in their logs
    native = subprocess.run([str(ROOT / "scripts" / "native.sh"), str(env)], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()
    native_path = "native" if native and "layout" in native[-1] else "pure Python (no cargo)"
    # pip and setuptools are half the archive's 3 000 files and nothing the job imports; every
    # application's containers unpack the archive file by file before they start
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", "pip",
                    "setuptools"], check=True)
    # what the archive expects of the nodes, written into it and printed: a packed venv is
    # honest only about what it can carry
    facts = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "interpreter": str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}."
                                                            f"{sys.version_info.minor}"),
        "leakproof": project["version"],
        "pyspark": "not included: the cluster's Spark ships its own (3.5 or 4.x)",
        "java": "whatever that Spark runs on: 8, 11 or 17 for 3.5; 17 or 21 for 4.x",
        "kerberos": "the node's MIT Kerberos library (libgssapi_krb5) for security.kerberos",
        "read path": f"{native_path}; a native build for Linux x86_64 and glibc like this "
                     f"machine's (the nodes read with the pure path if it cannot load)",
    }
    (env / "leakproof-env.json").write_text(json.dumps(facts, indent=2) + "\n")
    ARCHIVE.unlink(missing_ok=True)
    subprocess.run([str(Path(sys.executable).parent / "venv-pack"), "-p", str(env), "-o",
                    str(ARCHIVE), "-q"], check=True)
    print(f"{ARCHIVE}: {ARCHIVE.stat().st_size / 2**20:.1f} MiB in "
          f"{time.monotonic() - started:.0f}s; the nodes need:")
    for key, value in facts.items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
