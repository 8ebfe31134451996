"""The Kubernetes Pod Security Standards, checked on a pod template before it is submitted.

PodSecurity admission judges only pods, which Volcano creates long after the Job was
accepted, so a template that breaks the namespace's level would fail pod by pod in the
controller; here it is an error naming every offending field, before anything is submitted.
The rules are the ``latest`` standard as Kubernetes 1.35's PodSecurity admission
(k8s.io/pod-security-admission v0.35) implements it, ``hostUsers: false`` relaxations
included; ``tests/cluster/test_pod_security_admission.py`` compares them with a real API
server. Each level includes the one below it.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.template.errors import Path, Problems, error_at
from airflow_volcano_wandb.template.structure import all_containers
from airflow_volcano_wandb.template.values import dig, indexed, show

PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
DEFAULT_LEVEL = BASELINE

#: Capabilities a baseline container may add (the container runtime's defaults).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
#: Sysctls that are namespaced per pod, so setting them cannot affect the node.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
BASELINE_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
#: Volume sources a restricted pod may use: none of them reaches the node or the network.
RESTRICTED_VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_LIFECYCLE_HANDLERS = ("postStart", "preStop")


def _is_set(value: Any) -> bool:
    # Anything but unset/false counts, so a mistyped "true" is refused rather than waved on.
    return value is not None and value is not False


class _Checker:
    def __init__(self, level: str) -> None:
        self.level = level
        self.problems: Problems = []

    def add(self, path: Path, message: str) -> None:
        self.problems.append((path, f"{message} (pod security level {self.level!r})"))

    def baseline_pod(self, metadata: Any, spec: dict[str, Any], path: Path) -> None:
        spath = (*path, "spec")
        for key in _HOST_NAMESPACES:
            if _is_set(spec.get(key)):
                self.add((*spath, key), "must be unset or false: it shares the node's namespace")
        for i, volume in indexed(spec.get("volumes")):
            if dig(volume, "hostPath") is not None:
                self.add((*spath, "volumes", i, "hostPath"), "hostPath volumes are not allowed")
        context = dig(spec, "securityContext")
        cpath = (*spath, "securityContext")
        self.security_context(context, cpath)
        for i, sysctl in indexed(dig(context, "sysctls")):
            name = dig(sysctl, "name")
            if name not in SAFE_SYSCTLS:
                self.add(
                    (*cpath, "sysctls", i, "name"),
                    f"sysctl {name!r} is not one of the safe sysctls "
                    f"{', '.join(sorted(SAFE_SYSCTLS))}",
                )
        annotations = dig(metadata, "annotations")
        for key, value in annotations.items() if isinstance(annotations, dict) else ():
            if (
                isinstance(key, str)
                and key.startswith(APPARMOR_ANNOTATION_PREFIX)
                and value not in ("", "runtime/default")
                and not str(value).startswith("localhost/")
            ):
                self.add(
                    (*path, "metadata", "annotations", key),
                    f"AppArmor profile {value!r} is not allowed; use runtime/default or "
                    "localhost/<profile>",
                )

    def security_context(self, context: Any, path: Path) -> None:
        """The checks a pod's and a container's securityContext share."""
        if _is_set(dig(context, "windowsOptions", "hostProcess")):
            self.add(
                (*path, "windowsOptions", "hostProcess"),
                "must be unset or false: a HostProcess container runs on the node",
            )
        selinux = dig(context, "seLinuxOptions")
        if dig(selinux, "type") not in SELINUX_TYPES | {None}:
            self.add(
                (*path, "seLinuxOptions", "type"),
                f"SELinux type {dig(selinux, 'type')!r} is not one of "
                f"{', '.join(sorted(t for t in SELINUX_TYPES if t))}",
            )
        for key in ("user", "role"):
            if dig(selinux, key) not in ("", None):
                self.add((*path, "seLinuxOptions", key), f"a custom SELinux {key} is not allowed")
        for key, what, allowed in (
            ("seccompProfile", "seccomp", BASELINE_SECCOMP),
            ("appArmorProfile", "AppArmor", APPARMOR_TYPES),
        ):
            profile = dig(context, key, "type")
            if profile is not None and profile not in allowed:
                self.add(
                    (*path, key, "type"),
                    f"{what} profile {profile!r} is not allowed; use RuntimeDefault or Localhost",
                )

    def baseline_container(
        self, container: dict[str, Any], path: Path, user_namespace: bool
    ) -> None:
        context = dig(container, "securityContext")
        cpath = (*path, "securityContext")
        self.security_context(context, cpath)
        if _is_set(dig(context, "privileged")):
            self.add((*cpath, "privileged"), "must be unset or false")
        # An unmasked /proc exposes the node's only when the pod shares the node's user
        # namespace, so baseline allows it in a user namespace; restricted never does (as
        # the local kube-apiserver's PodSecurity v0.35 decides).
        if dig(context, "procMount") not in (None, "Default") and (
            self.level == RESTRICTED or not user_namespace
        ):
            self.add((*cpath, "procMount"), "must be unset or Default (a masked /proc)")
        allowed = RESTRICTED_CAPABILITIES if self.level == RESTRICTED else BASELINE_CAPABILITIES
        for i, capability in indexed(dig(context, "capabilities", "add")):
            if capability not in allowed:
                self.add(
                    (*cpath, "capabilities", "add", i),
                    f"capability {capability!r} may not be added; allowed: "
                    f"{', '.join(sorted(allowed))}",
                )
        for i, port in indexed(container.get("ports")):
            if dig(port, "hostPort") not in (None, 0):
                self.add((*path, "ports", i, "hostPort"), "must be unset or 0")
        for probe in _PROBES:
            for handler in ("httpGet", "tcpSocket"):
                self.no_host(container, (probe, handler), path)
        for event in _LIFECYCLE_HANDLERS:
            for handler in ("httpGet", "tcpSocket"):
                self.no_host(container, ("lifecycle", event, handler), path)

    def no_host(self, container: dict[str, Any], keys: tuple[str, ...], path: Path) -> None:
        # A probe or hook aimed at another host turns the kubelet into a request forwarder.
        if dig(container, *keys, "host") not in (None, ""):
            self.add((*path, *keys, "host"), "must be unset: the kubelet would connect elsewhere")

    def restricted(self, spec: dict[str, Any], path: Path, user_namespace: bool) -> None:
        spath = (*path, "spec")
        for i, volume in indexed(spec.get("volumes")):
            for key in volume if isinstance(volume, dict) else ():
                if key != "name" and key not in RESTRICTED_VOLUME_SOURCES and key != "hostPath":
                    self.add(
                        (*spath, "volumes", i, key),
                        f"volume type {key!r} is not allowed; allowed: "
                        f"{', '.join(sorted(RESTRICTED_VOLUME_SOURCES))}",
                    )
        pod = dig(spec, "securityContext")
        ppath = (*spath, "securityContext")
        # Linux-only settings do not apply to a pod that declares itself Windows.
        linux = dig(spec, "os", "name") != "windows"
        # Root in a user namespace is not root on the node.
        root_checked = not user_namespace
        pod_non_root = dig(pod, "runAsNonRoot")
        if root_checked and pod_non_root is not None and pod_non_root is not True:
            self.add((*ppath, "runAsNonRoot"), "must be true")
        if root_checked and dig(pod, "runAsUser") == 0:
            self.add((*ppath, "runAsUser"), "must not be 0 (root)")
        pod_seccomp = dig(pod, "seccompProfile", "type")
        for cpath, container in all_containers(spec, spath):
            context = dig(container, "securityContext")
            xpath = (*cpath, "securityContext")
            non_root = dig(context, "runAsNonRoot")
            if (
                root_checked
                and non_root is not True
                and (non_root is not None or pod_non_root is not True)
            ):
                self.add(
                    (*xpath, "runAsNonRoot"),
                    "must be true (here or in the pod's securityContext)",
                )
            if root_checked and dig(context, "runAsUser") == 0:
                self.add((*xpath, "runAsUser"), "must not be 0 (root)")
            if not linux:
                continue
            if dig(context, "allowPrivilegeEscalation") is not False:
                self.add((*xpath, "allowPrivilegeEscalation"), "must be false")
            seccomp = dig(context, "seccompProfile", "type")
            if seccomp is None and pod_seccomp not in BASELINE_SECCOMP:
                self.add(
                    (*xpath, "seccompProfile", "type"),
                    "must be RuntimeDefault or Localhost (here or in the pod's securityContext)",
                )
            drop = dig(context, "capabilities", "drop")
            if not isinstance(drop, list) or "ALL" not in drop:
                self.add((*xpath, "capabilities", "drop"), "must include ALL")


def check_level(level: Any) -> str:
    """``level`` if it names a Pod Security Standards level; else an error naming
    ``pod_security``, the :func:`~airflow_volcano_wandb.template.render_job` argument."""
    if not isinstance(level, str) or level not in LEVELS:
        raise error_at(
            ("pod_security",),
            f"unknown pod security level {show(level)}; use one of {', '.join(LEVELS)}",
        )
    return level


def violations(template: dict[str, Any], path: Path, level: str) -> Problems:
    """Every field of a pod template (``metadata`` and ``spec``) that breaks ``level``, with
    its JSON path under ``path``. The template's shape was validated already."""
    check = _Checker(check_level(level))
    spec = template.get("spec")
    if level == PRIVILEGED or not isinstance(spec, dict):
        return []
    user_namespace = spec.get("hostUsers") is False
    check.baseline_pod(template.get("metadata"), spec, path)
    for cpath, container in all_containers(spec, (*path, "spec")):
        check.baseline_container(container, cpath, user_namespace)
    if level == RESTRICTED:
        check.restricted(spec, path, user_namespace)
    return check.problems
