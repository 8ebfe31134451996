"""Pod templates for the Pod Security Standards: at least one per checked field, and
compliant ones. The unit tests hold the renderer to ``accepted_up_to``; the cluster test
holds it to what a real API server's PodSecurity admission decides for the same pod.

Every pod here is a valid pod apart from its security settings, so that the API server's
answer is about pod security and nothing else.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template import POD_SECURITY_LEVELS

#: What a case does to the restricted pod (in place).
Change = Callable[[dict[str, Any]], None]

IMAGE = "registry.example.com/team/train:1"
HARDENED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def restricted_pod() -> dict[str, Any]:
    """A pod that meets ``restricted``; each case changes one thing."""
    return {
        "metadata": {},
        "spec": {
            "containers": [
                {"name": "main", "image": IMAGE, "securityContext": copy.deepcopy(HARDENED)}
            ],
            "restartPolicy": "Never",
        },
    }


@dataclass(frozen=True)
class Case:
    name: str
    #: The strictest level that accepts the pod.
    accepted_up_to: str
    change: Change

    def pod(self) -> dict[str, Any]:
        """``restricted_pod()`` with this case's change."""
        pod = restricted_pod()
        self.change(pod)
        return pod

    def refused_at(self, level: str) -> bool:
        order = POD_SECURITY_LEVELS
        return order.index(level) > order.index(self.accepted_up_to)


def _spec(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def _context(pod: dict[str, Any]) -> dict[str, Any]:
    return _main(pod)["securityContext"]


def _pod_context(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"].setdefault("securityContext", {})


def _init(pod: dict[str, Any], context: dict[str, Any]) -> None:
    _spec(pod)["initContainers"] = [
        {"name": "init", "image": IMAGE, "securityContext": {**HARDENED, **context}}
    ]


def _set(where: Callable[[dict[str, Any]], dict[str, Any]], **fields: Any) -> Change:
    """The change that sets ``fields`` in the part of the pod ``where`` picks."""
    return lambda pod: where(pod).update(fields)


def _container(**fields: Any) -> Change:
    """Set ``fields`` in the main container's ``securityContext``."""
    return _set(_context, **fields)


def _pod(**fields: Any) -> Change:
    """Set ``fields`` in the pod's ``securityContext``."""
    return _set(_pod_context, **fields)


def _moved_to_pod(**fields: Any) -> Change:
    """Set ``fields`` in the pod's ``securityContext`` instead of the main container's."""

    def change(pod: dict[str, Any]) -> None:
        for name in fields:
            _context(pod).pop(name)
        _pod_context(pod).update(fields)

    return change


def _volume(source: dict[str, Any]) -> Change:
    return _set(_spec, volumes=[{"name": "data", **source}])


RESTRICTED, BASELINE, PRIVILEGED = "restricted", "baseline", "privileged"

CASES = [
    Case("restricted-compliant", RESTRICTED, lambda pod: None),
    Case("no-security-settings", BASELINE, lambda pod: _main(pod).pop("securityContext")),
    # --- baseline ---------------------------------------------------------------------
    Case("host-network", PRIVILEGED, _set(_spec, hostNetwork=True)),
    Case("host-pid", PRIVILEGED, _set(_spec, hostPID=True)),
    Case("host-ipc", PRIVILEGED, _set(_spec, hostIPC=True)),
    Case("host-namespaces-false", RESTRICTED, _set(_spec, hostNetwork=False)),
    # A privileged container may not also forbid privilege escalation (the API server
    # refuses that as invalid, before pod security is asked).
    Case("privileged", PRIVILEGED, _container(privileged=True, allowPrivilegeEscalation=True)),
    Case(
        "privileged-init",
        PRIVILEGED,
        lambda pod: _init(pod, {"privileged": True, "allowPrivilegeEscalation": True}),
    ),
    Case(
        "add-sys-admin",
        PRIVILEGED,
        lambda pod: _context(pod)["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    Case("add-chown", BASELINE, lambda pod: _context(pod)["capabilities"].update(add=["CHOWN"])),
    Case(
        "add-net-bind-service",
        RESTRICTED,
        lambda pod: _context(pod)["capabilities"].update(add=["NET_BIND_SERVICE"]),
    ),
    Case("host-path", PRIVILEGED, _volume({"hostPath": {"path": "/etc"}})),
    Case("host-port", PRIVILEGED, _set(_main, ports=[{"containerPort": 80, "hostPort": 8080}])),
    Case(
        "apparmor-annotation-unconfined",
        PRIVILEGED,
        lambda pod: pod["metadata"].update(
            annotations={"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
        ),
    ),
    Case(
        "apparmor-annotation-runtime-default",
        RESTRICTED,
        lambda pod: pod["metadata"].update(
            annotations={"container.apparmor.security.beta.kubernetes.io/main": "runtime/default"}
        ),
    ),
    Case("apparmor-field-unconfined", PRIVILEGED, _pod(appArmorProfile={"type": "Unconfined"})),
    Case(
        "apparmor-field-runtime-default",
        RESTRICTED,
        _container(appArmorProfile={"type": "RuntimeDefault"}),
    ),
    Case("selinux-type-spc", PRIVILEGED, _container(seLinuxOptions={"type": "spc_t"})),
    Case(
        "selinux-type-container",
        RESTRICTED,
        _container(seLinuxOptions={"type": "container_t", "level": "s0"}),
    ),
    Case("selinux-user", PRIVILEGED, _pod(seLinuxOptions={"user": "system_u"})),
    Case("selinux-role", PRIVILEGED, _container(seLinuxOptions={"role": "system_r"})),
    # Unmasked is valid only in a user namespace, where baseline (not restricted) allows it.
    Case(
        "proc-mount-unmasked",
        BASELINE,
        lambda pod: (
            _spec(pod).update(hostUsers=False),
            _context(pod).update(procMount="Unmasked"),
        ),
    ),
    Case("proc-mount-default", RESTRICTED, _container(procMount="Default")),
    Case("seccomp-unconfined-pod", PRIVILEGED, _pod(seccompProfile={"type": "Unconfined"})),
    Case(
        "seccomp-unconfined-container",
        PRIVILEGED,
        _container(seccompProfile={"type": "Unconfined"}),
    ),
    Case("sysctl-unsafe", PRIVILEGED, _pod(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
    Case(
        "sysctl-safe",
        RESTRICTED,
        _pod(sysctls=[{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]),
    ),
    Case(
        "probe-host",
        PRIVILEGED,
        _set(_main, livenessProbe={"httpGet": {"host": "10.0.0.1", "path": "/", "port": 80}}),
    ),
    # --- restricted -----------------------------------------------------------------------
    Case("volume-nfs", BASELINE, _volume({"nfs": {"server": "nfs.local", "path": "/x"}})),
    Case("volume-config-map", RESTRICTED, _volume({"configMap": {"name": "settings"}})),
    Case("volume-empty-dir", RESTRICTED, _volume({"emptyDir": {}})),
    Case(
        "privilege-escalation-unset",
        BASELINE,
        lambda pod: _context(pod).pop("allowPrivilegeEscalation"),
    ),
    Case(
        "privilege-escalation-init",
        BASELINE,
        lambda pod: _init(pod, {"allowPrivilegeEscalation": True}),
    ),
    Case("run-as-non-root-unset", BASELINE, lambda pod: _context(pod).pop("runAsNonRoot")),
    Case("run-as-non-root-on-pod", RESTRICTED, _moved_to_pod(runAsNonRoot=True)),
    Case("run-as-non-root-false-on-pod", BASELINE, _pod(runAsNonRoot=False)),
    Case("run-as-user-root", BASELINE, _container(runAsUser=0)),
    Case("run-as-user-1000", RESTRICTED, _container(runAsUser=1000)),
    Case("seccomp-unset", BASELINE, lambda pod: _context(pod).pop("seccompProfile")),
    Case("seccomp-on-pod", RESTRICTED, _moved_to_pod(seccompProfile={"type": "RuntimeDefault"})),
    Case("drop-all-missing", BASELINE, lambda pod: _context(pod)["capabilities"].pop("drop")),
]
