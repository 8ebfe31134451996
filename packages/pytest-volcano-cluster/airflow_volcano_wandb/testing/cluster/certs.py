"""The cluster's PKI: one CA, serving certs, client certs and the service-account signing key.

ECDSA P-256 everywhere because generating it is instant, and every component (Go TLS,
kube-apiserver's service-account token signer) accepts it.
"""

from __future__ import annotations

import datetime
import inspect
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=3650)

# Names the apiserver serving cert must carry: in-cluster clients reach it as the
# `kubernetes` service (first IP of the service range), the harness as 127.0.0.1.
APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True)
class PKI:
    """Paths of every PEM file the components are started with."""

    dir: Path

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def ca(self) -> Path:
        return self.cert("ca")

    @property
    def sa_key(self) -> Path:
        return self.key("sa")

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _key_usage(*allowed: str) -> x509.KeyUsage:
    """A ``KeyUsage`` that allows the ``allowed`` uses and none of its other flags."""
    flags = inspect.signature(x509.KeyUsage).parameters
    return x509.KeyUsage(**{flag: flag in allowed for flag in flags})


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        # Backdated so a clock that is a little behind does not reject fresh certs.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
    )


def _issue(
    pki: PKI,
    name: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    *,
    cn: str,
    org: str | None = None,
    server: bool = False,
    client: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> None:
    key = _new_key()
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        _builder(_name(cn, org), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(pki.key(name), key)
    pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def ensure_pki(directory: Path) -> PKI:
    """Create the PKI under ``directory`` unless it is already there (reused across restarts)."""
    pki = PKI(directory)
    if pki.ca.exists() and pki.sa_pub.exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)

    ca_key = _new_key()
    ca_name = _name("airflow-volcano-wandb-local-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage("digital_signature", "key_cert_sign", "crl_sign"), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.key("ca"), ca_key)
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    local = ("localhost",)
    loopback = ("127.0.0.1",)
    _issue(
        pki,
        "apiserver",
        ca_key,
        ca_cert,
        cn="kube-apiserver",
        server=True,
        dns=APISERVER_DNS,
        ips=APISERVER_IPS,
    )
    # system:masters keeps the harness, the Volcano components and the apiserver's calls to
    # the KWOK "kubelet" free of RBAC setup; the cluster is a disposable test fixture.
    _issue(pki, "admin", ca_key, ca_cert, cn="kubernetes-admin", org="system:masters", client=True)
    _issue(
        pki,
        "apiserver-kubelet-client",
        ca_key,
        ca_cert,
        cn="kube-apiserver-kubelet-client",
        org="system:masters",
        client=True,
    )
    _issue(
        pki,
        "webhook",
        ca_key,
        ca_cert,
        cn="volcano-admission",
        server=True,
        dns=local,
        ips=loopback,
    )
    _issue(pki, "kwok", ca_key, ca_cert, cn="kwok-kubelet", server=True, dns=local, ips=loopback)

    sa_key = _new_key()
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
