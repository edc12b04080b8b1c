"""A throw-away CA and a server certificate for 127.0.0.1 / localhost, made with the openssl CLI."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    ca: str
    cert: str
    key: str
    other_ca: str  # a CA that did not sign the server certificate


def openssl(*args: str, cwd: Path | None = None) -> None:
    """`openssl ARGS` in `cwd`; CalledProcessError when it fails."""
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_tls(directory: Path) -> TlsFiles:
    if shutil.which("openssl") is None:
        raise FileNotFoundError("openssl is not installed")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other-ca"):
        openssl(
            "req",
            "-x509",
            *ec,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            "-subj",
            f"/CN=coloc test {name}",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
            cwd=directory)
    (directory / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        cwd=directory,
    )
    return TlsFiles(
        str(directory / "ca.crt"),
        str(directory / "server.crt"),
        str(directory / "server.key"),
        str(directory / "other-ca.crt"),
    )
