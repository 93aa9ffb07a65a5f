"""The self-signed TLS certificate the management API is served with (the Azure SDKs' administration
clients speak HTTPS): made once per namespace, kept beside its data (so clients that trust it keep
trusting it across restarts), valid for `localhost`, 127.0.0.1, ::1 and the names given (the node's
host name and address). It is its own authority: trust it by pointing the client at the PEM file
(`REQUESTS_CA_BUNDLE` for the sync SDK, `SSL_CERT_FILE` for the async one).
"""
from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
from datetime import datetime, timedelta, timezone
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERTIFICATE_FILE = "tls-certificate.pem"
KEY_FILE = "tls-key.pem"
VALID_DAYS = 3650
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def certificate_dir(name: str, data_dir: str | None) -> str:
    """Where a namespace keeps its certificate: its data directory, or for a namespace kept in
    memory, `<temp dir>/ray_broker-tls/<name>`."""
    return data_dir or os.path.join(tempfile.gettempdir(), "ray_broker-tls", name)


def certificate_path(name: str, data_dir: str | None) -> str:
    """The PEM file of a namespace's certificate (what clients trust)."""
    return os.path.join(certificate_dir(name, data_dir), CERTIFICATE_FILE)


def _subject_names(names: Sequence[str]) -> list[x509.GeneralName]:
    general: list[x509.GeneralName] = []
    for name in dict.fromkeys((*LOCAL_NAMES, *names)):
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            general.append(x509.DNSName(name))
    return general


def make_certificate(common_name: str, names: Sequence[str]) -> tuple[bytes, bytes]:
    """A new self-signed certificate for `names` (and the local ones) and its key, both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(timezone.utc)
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_subject_names(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=True, key_cert_sign=True, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def ensure_certificate(directory: str, common_name: str, names: Sequence[str]) -> tuple[str, str]:
    """The certificate and key files in `directory`, made first if either is missing."""
    cert_path, key_path = os.path.join(directory, CERTIFICATE_FILE), os.path.join(directory, KEY_FILE)
    if not (os.path.exists(cert_path) and os.path.exists(key_path)):
        os.makedirs(directory, exist_ok=True)
        cert_pem, key_pem = make_certificate(common_name, names)
        descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(key_pem)
        with open(cert_path, "wb") as out:
            out.write(cert_pem)
    return cert_path, key_path


def server_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    """A TLS server context serving the certificate, offering HTTP/1.1."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    context.set_alpn_protocols(["http/1.1"])
    return context
