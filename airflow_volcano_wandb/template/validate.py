"""Checks on the rendered Volcano Job, before anything is submitted.

Each problem names the JSON path of its field; all problems are reported together. The checks
mirror what Volcano v1.14.1's CRD schema and admission webhook would reject, plus the pod-name
length that otherwise only fails when the controller creates pods, long after submission.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard, TypeVar

from airflow_volcano_wandb.template import naming, volcano
from airflow_volcano_wandb.template import plugins as releases
from airflow_volcano_wandb.template.errors import Path, Problems, TemplateError, errors_at
from airflow_volcano_wandb.template.gpus import is_gpu_count, is_gpu_resource
from airflow_volcano_wandb.template.quantity import check_quantity
from airflow_volcano_wandb.template.structure import CONTAINER_LISTS
from airflow_volcano_wandb.template.torchrun import NPROC_ENV, NPROC_WORDS, is_nproc
from airflow_volcano_wandb.template.values import INT64_MAX, INT64_MIN, show, type_name

_T = TypeVar("_T")


class _Checker:
    def __init__(self, max_replicas: int, target: releases.Version) -> None:
        self.max_replicas = max_replicas
        self.target = target
        self.problems: Problems = []

    def add(self, path: Path, message: str) -> None:
        self.problems.append((path, message))

    def kind(self, value: Any, path: Path, expected: type[_T], what: str) -> TypeGuard[_T]:
        """Whether ``value`` is an ``expected``; if not, the problem (``what`` it must be)."""
        if isinstance(value, expected):
            return True
        self.add(path, f"must be {what}, found {type_name(value)} {show(value)}")
        return False

    def count(
        self,
        parent: dict[str, Any],
        key: str,
        path: Path,
        *,
        required: bool = False,
        maximum: int | None = None,
    ) -> int | None:
        if key not in parent:
            if required:
                self.add((*path, key), "is required")
            return None
        value = parent[key]
        if type(value) is not int:
            self.add((*path, key), f"must be an integer, found {type_name(value)} {show(value)}")
            return None
        if value < 0:
            self.add((*path, key), f"must be >= 0, found {value}")
        elif maximum is not None and value > maximum:
            self.add((*path, key), f"is {value}, above the allowed maximum of {maximum}")
        return value

    def named(self, value: Any, path: Path, rule: Callable[[Any], bool], what: str) -> None:
        if not rule(value):
            self.add(path, f"{show(value)} is not a valid {what}")

    def metadata(self, metadata: Any, path: Path) -> None:
        if not self.kind(metadata, path, dict, "a mapping"):
            return
        for key, is_labels in (("labels", True), ("annotations", False)):
            values = metadata.get(key)
            if values is None or not self.kind(values, (*path, key), dict, "a mapping"):
                continue
            for name, value in values.items():
                self.named(name, (*path, key, name), naming.is_qualified_name, f"{key[:-1]} key")
                if is_labels:
                    self.named(value, (*path, key, name), naming.is_label_value, "label value")
                else:
                    self.kind(value, (*path, key, name), str, "a string")

    def volumes(self, volumes: Any, path: Path) -> None:
        """Volcano's webhook rules for job volumes (``validateIO``): a mountPath, used once;
        either an existing claim (``volumeClaimName``, a valid name) or a claim to create."""
        if volumes is None:
            return
        if not isinstance(volumes, list):
            self.add(path, "must be a list of volumes")
            return
        mount_paths: set[str] = set()
        for i, volume in enumerate(volumes):
            where = (*path, i)
            if not isinstance(volume, dict):
                self.add(where, "must be a mapping")
                continue
            mount_path = volume.get("mountPath")
            if not isinstance(mount_path, str) or not mount_path:
                self.add((*where, "mountPath"), "is required")
            elif mount_path in mount_paths:
                self.add((*where, "mountPath"), f"{mount_path!r} is used twice")
            else:
                mount_paths.add(mount_path)
            claim_name, claim = volume.get("volumeClaimName"), volume.get("volumeClaim")
            if not claim_name and claim is None:
                self.add(
                    where, "needs volumeClaimName (an existing PVC) or volumeClaim (a new one)"
                )
            elif claim_name and claim is not None:
                self.add(where, "has both volumeClaimName and volumeClaim; give one")
            elif claim_name and not naming.is_dns1123_subdomain(claim_name):
                self.add((*where, "volumeClaimName"), f"{claim_name!r} is not a valid PVC name")

    def policies(self, policies: Any, path: Path) -> None:
        if policies is None or not self.kind(policies, path, list, "a list"):
            return
        seen: set[str] = set()
        exit_codes: set[int] = set()
        for i, policy in enumerate(policies):
            ppath = (*path, i)
            if not self.kind(policy, ppath, dict, "a mapping"):
                continue
            events = policy.get("events") or []
            if not isinstance(events, list):
                self.add((*ppath, "events"), f"must be a list, found {type_name(events)}")
                events = []
            if "event" in policy:
                events = [*events, policy["event"]]
            has_exit = "exitCode" in policy
            if events and has_exit:
                self.add(ppath, "give either event(s) or exitCode, not both")
            elif not events and not has_exit:
                self.add(ppath, "needs an event, events or an exitCode")
            for event in dict.fromkeys(e if isinstance(e, str) else show(e) for e in events):
                if event not in volcano.POLICY_EVENTS:
                    note = " (internal to Volcano)" if event in volcano.INTERNAL_EVENTS else ""
                    self.add(
                        ppath,
                        f"event {event!r}{note} is not one of "
                        f"{', '.join(sorted(volcano.POLICY_EVENTS))}",
                    )
                elif event in seen:
                    self.add(ppath, f"event {event!r} appears in more than one policy")
                seen.add(event)
            if has_exit:
                code = policy["exitCode"]
                if type(code) is not int or code == 0:
                    self.add(
                        (*ppath, "exitCode"), f"must be a non-zero integer, found {show(code)}"
                    )
                elif code in exit_codes:
                    self.add((*ppath, "exitCode"), f"exit code {code} appears twice")
                else:
                    exit_codes.add(code)
            action = policy.get("action")
            # A mapping or a list is no action, and a set's `in` would raise on it (unhashable).
            if not isinstance(action, str) or action not in volcano.POLICY_ACTIONS:
                internal = isinstance(action, str) and action in volcano.INTERNAL_ACTIONS
                note = " (internal to Volcano)" if internal else ""
                self.add(
                    (*ppath, "action"),
                    f"{show(action)}{note} is not one of "
                    f"{', '.join(sorted(volcano.POLICY_ACTIONS))}",
                )
        if "*" in seen and len(seen) > 1:
            self.add(path, "a '*' policy must be the only event policy")

    def container(self, container: Any, path: Path, names: set[str | None]) -> None:
        """One container; ``names``: the pod's container names so far (None: one without)."""
        if not self.kind(container, path, dict, "a mapping"):
            return
        name = container.get("name")
        self.named(name, (*path, "name"), naming.is_dns1123_label, "container name")
        if name in names:
            self.add((*path, "name"), f"container name {name!r} is used twice in the pod")
        names.add(name)
        image = container.get("image")
        if not isinstance(image, str) or not image.strip():
            self.add((*path, "image"), f"must be a non-empty string, found {show(image)}")
        for key in ("command", "args"):
            items = container.get(key)
            if items is not None and (
                not isinstance(items, list) or not all(isinstance(x, str) for x in items)
            ):
                self.add((*path, key), "must be a list of strings")
        self.env(container.get("env"), (*path, "env"))
        resources, rpath = container.get("resources"), (*path, "resources")
        if resources is not None and self.kind(resources, rpath, dict, "a mapping"):
            for kind in ("limits", "requests"):
                values = resources.get(kind)
                if values is None or not self.kind(values, (*rpath, kind), dict, "a mapping"):
                    continue
                for resource, quantity in values.items():
                    qpath = (*rpath, kind, resource)
                    try:
                        check_quantity(quantity, qpath)
                    except TemplateError as exc:
                        self.problems.append((qpath, exc.problems[0][1]))
                        continue
                    # Kubernetes only hands out whole GPUs, and PET_NPROC_PER_NODE counts them.
                    if is_gpu_resource(str(resource)) and not is_gpu_count(quantity):
                        self.add(qpath, f"must be a whole number of GPUs, found {show(quantity)}")

    def env(self, env: Any, path: Path) -> None:
        if env is None or not self.kind(env, path, list, "a list"):
            return
        for i, entry in enumerate(env):
            if not self.kind(entry, (*path, i), dict, "a mapping"):
                continue
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                self.add((*path, i, "name"), f"must be a non-empty string, found {show(name)}")
            if "value" in entry and "valueFrom" in entry:
                self.add((*path, i), "give either value or valueFrom, not both")
            if "value" in entry:
                value = entry["value"]
                if (
                    self.kind(value, (*path, i, "value"), str, "a string")
                    and name == NPROC_ENV
                    and not is_nproc(value)
                ):
                    self.add(
                        (*path, i, "value"),
                        f"{NPROC_ENV} must be a positive number of processes or one of "
                        f"{', '.join(NPROC_WORDS)}, found {show(value)}",
                    )
            if "valueFrom" in entry:
                self.kind(entry["valueFrom"], (*path, i, "valueFrom"), dict, "a mapping")

    def task(self, task: dict[str, Any], path: Path) -> int | None:
        self.named(
            task["name"],
            (*path, "name"),
            naming.is_dns1123_label,
            "task name (DNS-1123 label: lowercase letters, digits and '-', at most 63)",
        )
        replicas = self.count(task, "replicas", path, required=True, maximum=self.max_replicas)
        minimum = self.count(task, "minAvailable", path)
        if replicas is not None and minimum is not None and minimum > replicas:
            self.add((*path, "minAvailable"), f"is {minimum}, more than replicas ({replicas})")
        self.count(task, "maxRetry", path)
        self.policies(task.get("policies"), (*path, "policies"))
        template = task.get("template")
        tpath = (*path, "template")
        if not self.kind(template, tpath, dict, "a mapping (the pod template)"):
            return replicas
        if "metadata" in template:
            self.metadata(template["metadata"], (*tpath, "metadata"))
        spec = template.get("spec")
        if not self.kind(spec, (*tpath, "spec"), dict, "a mapping (the pod spec)"):
            return replicas
        if not isinstance(spec.get("containers"), list) or not spec["containers"]:
            self.add((*tpath, "spec", "containers"), "must be a non-empty list")
        names: set[str | None] = set()
        for key in CONTAINER_LISTS:
            items = spec.get(key)
            if items is None or not self.kind(items, (*tpath, "spec", key), list, "a list"):
                continue
            for i, container in enumerate(items):
                self.container(container, (*tpath, "spec", key, i), names)
        return replicas

    def plugins(self, plugins: Any, tasks: list[dict[str, Any]]) -> None:
        path: Path = ("spec", "plugins")
        if plugins is None or not self.kind(plugins, path, dict, "a mapping"):
            return
        by_name = {t["name"]: t for t in tasks}
        for name, arguments in plugins.items():
            if name not in releases.PLUGIN_SINCE:
                self.add(
                    (*path, name),
                    f"unknown Volcano plugin; known: {', '.join(sorted(releases.PLUGIN_SINCE))}",
                )
            elif name not in releases.plugins_in(self.target):
                self.add(
                    (*path, name),
                    f"Volcano {releases.show_version(self.target)} has no {name} plugin (it "
                    f"came in {releases.show_version(releases.PLUGIN_SINCE[name])}), so its "
                    "admission webhook would refuse the job: remove the plugin, or target the "
                    "cluster's release (volcano_version, [volcano_wandb] volcano_version)",
                )
            if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
                self.add((*path, name), "plugin arguments must be a list of strings")
                continue
            if name not in volcano.ROLE_PLUGINS:
                continue
            roles, explicit = volcano.plugin_roles(arguments)
            for role, task_name in roles.items():
                if task_name in by_name:
                    continue
                if role == "master" or role in explicit:
                    self.add(
                        (*path, name),
                        f"--{role}={task_name} names no task; tasks are "
                        f"{', '.join(map(str, by_name))}",
                    )
            master = by_name.get(roles["master"])
            if name == "pytorch" and master is not None and master.get("replicas") != 1:
                # Volcano gives every pod of the master task RANK=0.
                self.add(
                    (*path, name),
                    f"the pytorch master task {roles['master']!r} must have "
                    f"exactly 1 replica, found {show(master.get('replicas'))}",
                )

    def job_name(
        self, job: dict[str, Any], tasks: list[dict[str, Any]], replicas: list[int | None]
    ) -> None:
        name = job["metadata"].get("name")
        if not naming.is_dns1035_label(name):
            self.add(("metadata", "name"), f"{show(name)} is not a valid job name")
            return
        for i, task in enumerate(tasks):
            given = replicas[i]  # a local, so that mypy narrows it
            count = given if isinstance(given, int) else self.max_replicas
            pod = naming.pod_name(name, task["name"], max(count - 1, 0))
            if len(pod) > naming.DNS1123_LABEL_MAX_LENGTH:
                self.add(("spec", "tasks", i, "name"), f"pod name {pod!r} is longer than 63")


def _numbers(node: Any, path: Path, problems: Problems) -> None:
    """Every number must survive Kubernetes' int64 decoding (floats were checked on copy)."""
    if isinstance(node, dict):
        for key, item in node.items():
            _numbers(item, (*path, key), problems)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _numbers(item, (*path, i), problems)
    elif type(node) is int and not INT64_MIN <= node <= INT64_MAX:
        problems.append((path, "integer out of the int64 range Kubernetes accepts"))


def validate(
    job: dict[str, Any],
    tasks: list[dict[str, Any]],
    max_replicas: int,
    wide: list[Path],
    target: releases.Version,
) -> None:
    """Raise one :class:`TemplateError` listing every problem found in the rendered job.

    ``wide`` lists where macros inserted integers beyond int64; the template's own numbers
    and the overrides' were checked when they were copied, so only these need a look.
    ``target`` is the Volcano release the job is for: it must have every plugin named.
    """
    check = _Checker(max_replicas, target)
    check.metadata(job.get("metadata"), ("metadata",))
    namespace = job["metadata"].get("namespace")
    if namespace is not None:
        check.named(namespace, ("metadata", "namespace"), naming.is_dns1123_label, "namespace")
    spec = job["spec"]
    check.kind(spec.get("schedulerName"), ("spec", "schedulerName"), str, "a string")
    if "queue" in spec:
        check.kind(spec["queue"], ("spec", "queue"), str, "a string")
    seen: set[str] = set()
    replicas: list[int | None] = []
    for i, task in enumerate(tasks):
        if task["name"] in seen:
            check.add(("spec", "tasks", i, "name"), f"task name {task['name']!r} is used twice")
        seen.add(task["name"])
        replicas.append(check.task(task, ("spec", "tasks", i)))
    minimum = check.count(spec, "minAvailable", ("spec",))
    # A task whose replicas are not a count (None) is reported by its own check above.
    counted = [count for count in replicas if count is not None]
    if minimum is not None and len(counted) == len(replicas) and minimum > sum(counted):
        check.add(
            ("spec", "minAvailable"),
            f"is {minimum}, more than the total replicas ({sum(counted)})",
        )
    check.count(spec, "maxRetry", ("spec",))
    check.count(spec, "ttlSecondsAfterFinished", ("spec",))
    check.policies(spec.get("policies"), ("spec", "policies"))
    check.volumes(spec.get("volumes"), ("spec", "volumes"))
    check.plugins(spec.get("plugins"), tasks)
    check.job_name(job, tasks, replicas)
    for path in wide:
        node: Any = job
        try:
            for key in path:
                node = node[key]
        except (KeyError, IndexError, TypeError):
            continue  # a later stage removed it
        _numbers(node, path, check.problems)
    if check.problems:
        raise errors_at(
            check.problems,
            f"the rendered Volcano Job is invalid ({len(check.problems)} problem(s))",
        )
