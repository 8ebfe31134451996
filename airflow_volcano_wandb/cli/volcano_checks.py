"""The doctor's checks of Volcano itself (pure): its CRDs served, its admission webhooks
registered, the release installed against the one jobs are rendered for, the queue Open."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_volcano_wandb.cli.permissions import REQUIRED_APIS
from airflow_volcano_wandb.cli.report import FAIL, OK, WARN, Result
from airflow_volcano_wandb.cli.volcano_install import (
    VOLCANO_IMAGES,
    installed_volcano_image,
    repository_and_tag,
)
from airflow_volcano_wandb.template.plugins import (
    Version,
    VersionError,
    parse_version,
    plugins_in,
    show_version,
    target_version,
)
from airflow_volcano_wandb.versions import VOLCANO_VERSION

VOLCANO_INSTALL_HINT = (
    f"install Volcano {VOLCANO_VERSION}: helm repo add volcano-sh "
    f"https://volcano-sh.github.io/helm-charts && helm install volcano volcano-sh/volcano "
    f"-n volcano-system --create-namespace --version {VOLCANO_VERSION.removeprefix('v')}"
)


def check_apis(served: Mapping[str, Iterable[str]]) -> Result:
    """``served``: group/version -> resource names the API server's discovery lists."""
    missing = [
        f"{resource}.{gv.split('/')[0]}"
        for gv, resource in REQUIRED_APIS
        if resource not in set(served.get(gv, ()))
    ]
    if missing:
        return Result(
            "Volcano CRDs", FAIL, "not served: " + ", ".join(missing), VOLCANO_INSTALL_HINT
        )
    return Result("Volcano CRDs", OK, "jobs, podgroups and queues are served")


def _covers_volcano_jobs(configuration: Mapping[str, Any]) -> bool:
    for webhook in configuration.get("webhooks") or ():
        for rule in webhook.get("rules") or ():
            groups, resources = rule.get("apiGroups") or (), rule.get("resources") or ()
            if ("batch.volcano.sh" in groups or "*" in groups) and (
                "jobs" in resources or "*" in resources
            ):
                return True
    return False


def check_webhooks(
    mutating: Sequence[Mapping[str, Any]] | None, validating: Sequence[Mapping[str, Any]] | None
) -> Result:
    """Webhook configurations (``None``: this identity may not list them)."""
    name = "Volcano admission webhooks"
    if mutating is None or validating is None:
        # The least-privilege Role is namespaced on purpose, so this is not the setup's fault.
        return Result(
            name,
            WARN,
            "this identity may not list webhook configurations (expected for the "
            "least-privilege Role); run doctor once with an admin connection",
        )
    missing = [
        kind
        for kind, configurations in (("mutating", mutating), ("validating", validating))
        if not any(_covers_volcano_jobs(c) for c in configurations)
    ]
    if missing:
        return Result(
            name,
            FAIL,
            "no " + " or ".join(missing) + " webhook for jobs.batch.volcano.sh: jobs would "
            "not be defaulted/validated the way Volcano expects",
            VOLCANO_INSTALL_HINT + " (the chart registers the webhooks)",
        )
    return Result(name, OK, "mutating and validating webhooks for jobs.batch.volcano.sh exist")


def check_volcano_version(
    target: str, deployments: Sequence[Mapping[str, Any]] | None, namespace: str
) -> Result:
    """The installed Volcano (its Deployments in ``namespace``; ``None``: this identity may
    not list them) against the release jobs are rendered for (``target``,
    ``[volcano_wandb] volcano_version``)."""
    title = "Volcano version"
    hint = "set [volcano_wandb] volcano_version (or an operator's volcano_version) to {}"
    try:
        wanted = target_version(target)
    except VersionError as err:
        return Result(title, FAIL, f"[volcano_wandb] volcano_version: {err}", hint.format("it"))
    rendered = f"jobs are rendered for {show_version(wanted)}"

    def unknown(why: str, fix: str) -> Result:
        return Result(title, WARN, f"the installed release is unknown: {why}; {rendered}", fix)

    if deployments is None:
        return unknown(
            f"this identity may not list Deployments in {namespace!r} (expected for the "
            "least-privilege Role)",
            "run doctor once with an admin connection",
        )
    image = installed_volcano_image(deployments)
    if image is None:
        return unknown(
            f"no {' or '.join(VOLCANO_IMAGES)} Deployment in {namespace!r}",
            "pass --volcano-namespace where Volcano is installed",
        )
    try:
        installed = parse_version(repository_and_tag(image)[1])
    except VersionError:
        return unknown(
            f"image {image} names none", hint.format("the release that image was built from")
        )
    return _compare_releases(installed, wanted, rendered, hint.format(show_version(installed)))


def _compare_releases(installed: Version, wanted: Version, rendered: str, hint: str) -> Result:
    title = "Volcano version"
    detail = f"installed {show_version(installed)}, {rendered}"
    missing = plugins_in(wanted) - plugins_in(installed)
    if "hcclrank" in missing:
        # The renderer adds hcclrank to every PyTorch job: the webhook would refuse them all.
        return Result(
            title, FAIL, f"{detail}: its admission webhook would refuse every PyTorch job", hint
        )
    if missing:
        return Result(
            title,
            WARN,
            f"{detail}: a template naming {', '.join(sorted(missing))} would be refused",
            hint,
        )
    if "hcclrank" in plugins_in(installed) - plugins_in(wanted):
        return Result(
            title, WARN, f"{detail}: torchrun gets no PET_NODE_RANK (no hcclrank plugin)", hint
        )
    return Result(title, OK, detail)


def check_queue(name: str, queue: Mapping[str, Any] | None, readable: bool = True) -> Result:
    """The Volcano queue jobs are submitted to (``queue`` is ``None`` when it does not exist)."""
    title = f"Volcano queue {name!r}"
    if not readable:
        return Result(
            title,
            WARN,
            "this identity may not read queues (cluster-scoped); run doctor with an admin "
            "connection to check it",
        )
    if queue is None:
        return Result(
            title,
            FAIL,
            "does not exist",
            "create it (kind: Queue, apiVersion: scheduling.volcano.sh/v1beta1) or set the "
            "template's spec.queue to an existing one (kubectl get queues)",
        )
    state = (queue.get("status") or {}).get("state")
    if state != "Open":
        return Result(
            title,
            FAIL,
            f"state is {state or 'unknown'}, jobs would stay Pending",
            f"open it: vcctl queue operate --name {name} --action open",
        )
    return Result(title, OK, "exists and is Open")
