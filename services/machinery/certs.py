"""A throwaway certificate authority for a local mesh's HTTPS apiserver.

kubectl (client-go) does not send a bearer token over plain http, so an apiserver that
requires a token must serve TLS, as a real kube-apiserver does. `ensure_certs(dir)` creates,
once per state directory, a self-signed CA and a serving certificate for 127.0.0.1,
localhost and the extra names given (compose service names); the kubeconfig carries the CA
so clients verify the server. Keys never leave the state directory (mode 0600).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where a mesh's TLS material lives."""

    ca: Path
    cert: Path
    key: Path

    def ca_data(self) -> str:
        """The CA in base64 PEM, as kubeconfig's certificate-authority-data wants it."""
        return base64.b64encode(self.ca.read_bytes()).decode()


def _write(path: Path, data: bytes, *, private: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def ensure_certs(directory: str | Path, *, hosts: tuple[str, ...] = ()) -> CertPaths:
    """Create the CA and serving certificate in `directory` unless they exist."""
    d = Path(directory)
    paths = CertPaths(ca=d / "ca.crt", cert=d / "apiserver.crt", key=d / "apiserver.key")
    if paths.ca.exists() and paths.cert.exists() and paths.key.exists():
        return paths
    # Imported here: every component imports this module (for `client_context`), only the
    # launcher generates certificates, and `cryptography` costs ~0.1 s of start-up.
    from cryptography import x509  # noqa: PLC0415 - see above
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415 - see above
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415 - see above
    from cryptography.x509.oid import NameOID  # noqa: PLC0415 - see above

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubemesh-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, encipher_only=False,
                                       decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.DNSName("kubernetes"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubemesh-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(paths.ca, ca.public_bytes(serialization.Encoding.PEM), private=False)
    _write(paths.cert, cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write(paths.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()), private=True)
    return paths


def server_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """The apiserver's TLS context."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def client_context(ca: str | Path | None) -> ssl.SSLContext:
    """A client context trusting the mesh CA (or the system store when None)."""
    return ssl.create_default_context(cafile=str(ca) if ca else None)
