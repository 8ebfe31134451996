"""Who asked the apiserver what: client identities of their own, read back from its audit log.

The local cluster's kube-apiserver writes an audit log (JSON lines, Metadata level) when it is
started with one (``AVW_CLUSTER_AUDIT_LOG=1``, ``cluster up --audit-log``). Every event names
the user, the verb, the resource and its namespace. To tell two processes apart that would
otherwise both be the cluster's admin (two triggerers, say), give each a kubeconfig of its own
with :func:`kubeconfig_as`: a client certificate signed by the cluster's CA for a user name of
its own in ``system:masters`` (as powerful as the admin; only the name differs).

:func:`read_events` and :class:`ApiUse` then count, from the apiserver's side, each user's
requests by (verb, resource, namespace) in a time window, and the watches each user held open.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml


def kubeconfig_as(
    kubeconfig: Path, pki: Path, user: str, out: Path, groups: Iterable[str] = ("system:masters",)
) -> Path:
    """A copy of ``kubeconfig`` that authenticates as ``user`` (in ``groups``) with a client
    certificate signed by the CA in ``pki`` (``ca.crt``, ``ca.key``: the local cluster's)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    )
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for entry in config.get("users") or []:
        entry["user"] = {
            "client-certificate-data": base64.b64encode(pem_cert).decode(),
            "client-key-data": base64.b64encode(pem_key).decode(),
        }
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


def _time(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Event:
    """One request as the audit log saw it (its last stage written so far)."""

    audit_id: str
    user: str
    verb: str
    resource: str  # "jobs.batch.volcano.sh", "pods"
    namespace: str
    received: float  # wall clock, the apiserver's (same machine)
    completed: float | None  # None: still open (a watch)


def read_events(audit_log: Path, users: Iterable[str]) -> list[Event]:
    """Every request of ``users`` in ``audit_log``, one :class:`Event` each."""
    wanted = set(users)
    seen: dict[str, Event] = {}
    with open(audit_log, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not any(f'"username":"{u}"' in line for u in wanted):
                continue  # cheap: most lines are the control plane's
            record = json.loads(line)
            user = (record.get("user") or {}).get("username")
            if user not in wanted:
                continue
            ref = record.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("apiGroup"):
                resource += "." + ref["apiGroup"]
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            complete = record["stage"] in ("ResponseComplete", "Panic")
            seen[record["auditID"]] = Event(
                audit_id=record["auditID"],
                user=user,
                verb=record["verb"],
                resource=resource,
                namespace=ref.get("namespace", ""),
                received=_time(record["requestReceivedTimestamp"]),
                completed=_time(record["stageTimestamp"]) if complete else None,
            )
    return list(seen.values())


@dataclass
class ApiUse:
    """The requests of some users, for counting."""

    events: list[Event]

    def requests(
        self, start: float, end: float, namespaces: Iterable[str]
    ) -> Counter[tuple[str, str, str]]:
        """Requests received in [start, end) in ``namespaces``, by (user, verb, resource)."""
        spaces = set(namespaces)
        return Counter(
            (e.user, e.verb, e.resource)
            for e in self.events
            if e.namespace in spaces and start <= e.received < end
        )

    def watches(self, resource: str, start: float, end: float) -> dict[tuple[str, str], int]:
        """The most watches on ``resource`` each (user, namespace) held open at once during
        [start, end] (a renewed watch counts once: the old one ends before the new begins)."""
        spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for e in self.events:
            if e.verb != "watch" or e.resource != resource:
                continue
            closed = e.completed if e.completed is not None else float("inf")
            if e.received <= end and closed >= start:
                spans.setdefault((e.user, e.namespace), []).append((e.received, closed))
        most = {}
        for key, intervals in spans.items():
            # The open count just after each start that falls in the window (or at its start).
            points = [max(s, start) for s, _ in intervals]
            most[key] = max(sum(1 for s, c in intervals if s <= p < c) for p in points)
        return most

    def open_watches(self, resource: str, at: float) -> dict[tuple[str, str], int]:
        """Watches on ``resource`` open at ``at``, by (user, namespace)."""
        return dict(
            Counter(
                (e.user, e.namespace)
                for e in self.events
                if e.verb == "watch"
                and e.resource == resource
                and e.received <= at
                and (e.completed is None or e.completed > at)
            )
        )
