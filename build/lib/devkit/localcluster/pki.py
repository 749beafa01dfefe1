"""Certificates and keys for the local control plane.

One private CA signs the API servers' serving certificates and the admin client
certificate (CN=admin, O=system:masters); a separate ECDSA key pair signs service-account
tokens. Everything is written as PEM files into a cluster's directory, once: a restarted
cluster reuses what is there, so kubeconfigs written earlier stay valid.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class CertificateFiles:
    """Paths of the PEM files one local cluster needs."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path

    @classmethod
    def in_directory(cls, directory: Path) -> CertificateFiles:
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            service_account_key=directory / "sa.key",
            service_account_pub=directory / "sa.pub",
        )

    def exist(self) -> bool:
        return all(Path(p).exists() for p in vars(self).values())


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(
    *, subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _sign_leaf(
    *,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    builder = (
        _builder(subject=subject, issuer=ca_cert.subject, key=key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def ensure_certificates(directory: Path) -> CertificateFiles:
    """Create the CA, serving, admin and service-account files unless they exist."""
    files = CertificateFiles.in_directory(directory)
    if files.exist():
        return files
    directory.mkdir(parents=True, exist_ok=True)

    ca_key = _new_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainjob-dispatcher-local-ca")])
    ca_cert = (
        _builder(subject=ca_name, issuer=ca_name, key=ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    serving_cert, serving_key = _sign_leaf(
        ca_cert=ca_cert,
        ca_key=ca_key,
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        ],
    )
    admin_cert, admin_key = _sign_leaf(
        ca_cert=ca_cert,
        ca_key=ca_key,
        subject=x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
        ]),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = _new_key()

    files.ca_cert.write_bytes(_cert_pem(ca_cert))
    files.ca_key.write_bytes(_key_pem(ca_key))
    files.serving_cert.write_bytes(_cert_pem(serving_cert))
    files.serving_key.write_bytes(_key_pem(serving_key))
    files.admin_cert.write_bytes(_cert_pem(admin_cert))
    files.admin_key.write_bytes(_key_pem(admin_key))
    files.service_account_key.write_bytes(_key_pem(sa_key))
    files.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return files


def sign_client_certificate(
    files: CertificateFiles, *, user: str, groups: list[str]
) -> tuple[bytes, bytes]:
    """Return (certificate PEM, key PEM) for a client user signed by the cluster's CA.

    Used to make kubeconfigs for less privileged users (the RBAC test, revoked
    credentials in fault tests).
    """
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    cert, key = _sign_leaf(
        ca_cert=ca_cert,
        ca_key=ca_key,
        subject=x509.Name(attributes),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    return _cert_pem(cert), _key_pem(key)


def sign_server_certificate(
    files: CertificateFiles, *, common_name: str, ip: str = "127.0.0.1"
) -> tuple[bytes, bytes]:
    """Return (certificate PEM, key PEM) for a serving certificate of `ip` signed by the
    cluster's CA: the cluster's API server then trusts it with the CA bundle it already
    has (Kueue's webhook server, called at https://127.0.0.1:PORT)."""
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    cert, key = _sign_leaf(
        ca_cert=ca_cert,
        ca_key=ca_key,
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[x509.IPAddress(ipaddress.ip_address(ip)), x509.DNSName("localhost")],
    )
    return _cert_pem(cert), _key_pem(key)
