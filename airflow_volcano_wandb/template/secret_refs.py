"""Every Secret a pod template names, and the allow-list they are checked against.

A pod can read any Secret of its namespace that its template names, whatever its service
account may do: the kubelet resolves ``secretKeyRef``, ``envFrom`` and Secret volumes with its
own rights. A queue template is edited in W&B, so without this check a queue editor could
mount another team's key (or another job's ``avw-wandb-key-*`` Secret) and print it.
Only the Secrets the provider itself puts in (the run's own key) and those the DAG lists
(``allowed_secrets``) may be named.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_volcano_wandb.template.errors import Path, Problems
from airflow_volcano_wandb.template.structure import all_containers, pod_spec
from airflow_volcano_wandb.template.values import dig, indexed, show

#: Volume sources that name a Secret: source -> (where its reference is, the name's key).
#: ``secret`` mounts it; the others hand it to a volume driver, which may expose it as well.
VOLUME_SECRET_REFERENCES: dict[str, tuple[tuple[str, ...], str]] = {
    "secret": ((), "secretName"),
    "azureFile": ((), "secretName"),
    "cephfs": (("secretRef",), "name"),
    "cinder": (("secretRef",), "name"),
    "csi": (("nodePublishSecretRef",), "name"),
    "flexVolume": (("secretRef",), "name"),
    "iscsi": (("secretRef",), "name"),
    "rbd": (("secretRef",), "name"),
    "scaleIO": (("secretRef",), "name"),
    "storageos": (("secretRef",), "name"),
}


def _name(reference: Any, key: str) -> Any:
    """The Secret a reference names; a reference that is not a mapping is itself returned,
    so it is refused rather than skipped."""
    return reference.get(key) if isinstance(reference, dict) else reference


def references(spec: Any, spec_path: Path) -> Iterator[tuple[Path, Any]]:
    """``(path of the name field, the name)`` of every Secret a pod spec names: in the env
    and ``envFrom`` of every container (init and ephemeral too), in its volumes (projected
    ones included) and in ``imagePullSecrets``."""
    if not isinstance(spec, dict):
        return
    for cpath, container in all_containers(spec, spec_path):
        for i, entry in indexed(container.get("env")):
            ref = dig(entry, "valueFrom", "secretKeyRef")
            if ref is not None:
                yield (*cpath, "env", i, "valueFrom", "secretKeyRef", "name"), _name(ref, "name")
        for i, source in indexed(container.get("envFrom")):
            ref = dig(source, "secretRef")
            if ref is not None:
                yield (*cpath, "envFrom", i, "secretRef", "name"), _name(ref, "name")
    for i, volume in indexed(spec.get("volumes")):
        vpath = (*spec_path, "volumes", i)
        for source, (where, key) in VOLUME_SECRET_REFERENCES.items():
            ref = dig(volume, source, *where)
            if ref is not None:
                yield (*vpath, source, *where, key), _name(ref, key)
        for j, projection in indexed(dig(volume, "projected", "sources")):
            ref = dig(projection, "secret")
            if ref is not None:
                yield (*vpath, "projected", "sources", j, "secret", "name"), _name(ref, "name")
    for i, ref in indexed(spec.get("imagePullSecrets")):
        yield (*spec_path, "imagePullSecrets", i, "name"), _name(ref, "name")


def env_secret_names(env: Mapping[str, Any] | Sequence[Any]) -> frozenset[str]:
    """The Secrets an env list (``{name: value}`` has none) reads through ``secretKeyRef``."""
    if isinstance(env, Mapping):
        return frozenset()
    return frozenset(
        name
        for entry in env
        if isinstance(name := _name(dig(entry, "valueFrom", "secretKeyRef"), "name"), str)
    )


def secret_problems(tasks: list[dict[str, Any]], allowed: frozenset[str]) -> Problems:
    """Every Secret named by a pod template of ``tasks`` that is not in ``allowed``."""
    shown = ", ".join(sorted(allowed)) or "none"
    problems: Problems = []
    for i, task in enumerate(tasks):
        spec_path: Path = ("spec", "tasks", i, "template", "spec")
        for path, name in references(pod_spec(task), spec_path):
            if isinstance(name, str) and name in allowed:
                continue
            problems.append(
                (
                    path,
                    f"Secret {show(name)} is not in allowed_secrets ({shown}); a pod can read "
                    "every Secret its template names, so the DAG must allow each one",
                )
            )
    return problems
