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
    change: Callable[[dict[str, Any]], None]

    def pod(self) -> dict[str, Any]:
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


def _volume(source: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda pod: _spec(pod).update(volumes=[{"name": "data", **source}])


RESTRICTED, BASELINE, PRIVILEGED = "restricted", "baseline", "privileged"

CASES = [
    Case("restricted-compliant", RESTRICTED, lambda pod: None),
    Case("no-security-settings", BASELINE, lambda pod: _main(pod).pop("securityContext")),
    # --- baseline ---------------------------------------------------------------------
    Case("host-network", PRIVILEGED, lambda pod: _spec(pod).update(hostNetwork=True)),
    Case("host-pid", PRIVILEGED, lambda pod: _spec(pod).update(hostPID=True)),
    Case("host-ipc", PRIVILEGED, lambda pod: _spec(pod).update(hostIPC=True)),
    Case("host-namespaces-false", RESTRICTED, lambda pod: _spec(pod).update(hostNetwork=False)),
    # A privileged container may not also forbid privilege escalation (the API server
    # refuses that as invalid, before pod security is asked).
    Case(
        "privileged",
        PRIVILEGED,
        lambda pod: _context(pod).update(privileged=True, allowPrivilegeEscalation=True),
    ),
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
    Case(
        "host-port",
        PRIVILEGED,
        lambda pod: _main(pod).update(ports=[{"containerPort": 80, "hostPort": 8080}]),
    ),
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
    Case(
        "apparmor-field-unconfined",
        PRIVILEGED,
        lambda pod: _pod_context(pod).update(appArmorProfile={"type": "Unconfined"}),
    ),
    Case(
        "apparmor-field-runtime-default",
        RESTRICTED,
        lambda pod: _context(pod).update(appArmorProfile={"type": "RuntimeDefault"}),
    ),
    Case(
        "selinux-type-spc",
        PRIVILEGED,
        lambda pod: _context(pod).update(seLinuxOptions={"type": "spc_t"}),
    ),
    Case(
        "selinux-type-container",
        RESTRICTED,
        lambda pod: _context(pod).update(seLinuxOptions={"type": "container_t", "level": "s0"}),
    ),
    Case(
        "selinux-user",
        PRIVILEGED,
        lambda pod: _pod_context(pod).update(seLinuxOptions={"user": "system_u"}),
    ),
    Case(
        "selinux-role",
        PRIVILEGED,
        lambda pod: _context(pod).update(seLinuxOptions={"role": "system_r"}),
    ),
    # Unmasked is valid only in a user namespace, where baseline (not restricted) allows it.
    Case(
        "proc-mount-unmasked",
        BASELINE,
        lambda pod: (
            _spec(pod).update(hostUsers=False),
            _context(pod).update(procMount="Unmasked"),
        ),
    ),
    Case("proc-mount-default", RESTRICTED, lambda pod: _context(pod).update(procMount="Default")),
    Case(
        "seccomp-unconfined-pod",
        PRIVILEGED,
        lambda pod: _pod_context(pod).update(seccompProfile={"type": "Unconfined"}),
    ),
    Case(
        "seccomp-unconfined-container",
        PRIVILEGED,
        lambda pod: _context(pod).update(seccompProfile={"type": "Unconfined"}),
    ),
    Case(
        "sysctl-unsafe",
        PRIVILEGED,
        lambda pod: _pod_context(pod).update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    ),
    Case(
        "sysctl-safe",
        RESTRICTED,
        lambda pod: _pod_context(pod).update(
            sysctls=[{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]
        ),
    ),
    Case(
        "probe-host",
        PRIVILEGED,
        lambda pod: _main(pod).update(
            livenessProbe={"httpGet": {"host": "10.0.0.1", "path": "/", "port": 80}}
        ),
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
    Case(
        "run-as-non-root-on-pod",
        RESTRICTED,
        lambda pod: (
            _context(pod).pop("runAsNonRoot"),
            _pod_context(pod).update(runAsNonRoot=True),
        ),
    ),
    Case(
        "run-as-non-root-false-on-pod",
        BASELINE,
        lambda pod: _pod_context(pod).update(runAsNonRoot=False),
    ),
    Case("run-as-user-root", BASELINE, lambda pod: _context(pod).update(runAsUser=0)),
    Case("run-as-user-1000", RESTRICTED, lambda pod: _context(pod).update(runAsUser=1000)),
    Case("seccomp-unset", BASELINE, lambda pod: _context(pod).pop("seccompProfile")),
    Case(
        "seccomp-on-pod",
        RESTRICTED,
        lambda pod: (
            _context(pod).pop("seccompProfile"),
            _pod_context(pod).update(seccompProfile={"type": "RuntimeDefault"}),
        ),
    ),
    Case("drop-all-missing", BASELINE, lambda pod: _context(pod)["capabilities"].pop("drop")),
]
