"""Self-signed TLS certificates for the loopback services, made with the JDK's keytool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stackparts.base import StackError


def make_certificate(keystore: Path, pem: Path, password: str) -> None:
    """A self-signed certificate for 127.0.0.1 in a PKCS12 keystore, made once with the JDK's
    keytool, and its PEM for clients (kafka-python's ssl_cafile) to verify the server by."""
    if keystore.is_file() and pem.is_file():
        return
    keystore.parent.mkdir(parents=True, exist_ok=True)
    keystore.unlink(missing_ok=True)
    java = shutil.which("java")
    keytool = str(Path(java).resolve().parent / "keytool") if java else "keytool"
    common = ["-alias", "broker", "-keystore", str(keystore), "-storetype", "PKCS12",
              "-storepass", password]
    for args in (["-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
                  "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1,dns:localhost",
                  "-keypass", password],
                 ["-exportcert", "-rfc", "-file", str(pem)]):
        result = subprocess.run([keytool, *args, *common], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise StackError(f"keytool failed:\n{result.stdout}{result.stderr}")
