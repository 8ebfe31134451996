"""Which Volcano release a cluster runs, as its Deployments say (pure; ``doctor`` reads them).

Volcano serves no version through the Kubernetes API, so the image tag of its components is
the signal: the Helm chart (``installer/helm/chart/volcano``) runs every component as
``<registry>/volcanosh/<component>:<image_tag_version>``, the release's own tag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Images whose tag names the installed Volcano release, best first: the admission webhook is
#: what refuses a job naming a plugin it lacks; the controller manager's registry is what it
#: asks, and a Helm install runs both at one ``image_tag_version``.
VOLCANO_IMAGES = ("vc-webhook-manager", "vc-controller-manager")


def repository_and_tag(image: str) -> tuple[str, str]:
    """``registry/volcanosh/vc-webhook-manager:v1.14.1@sha256:...`` -> (repository, tag)."""
    name = image.split("@", 1)[0]
    repository, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:  # no tag, only a registry port
        return name, ""
    return repository, tag


def installed_volcano_image(deployments: Iterable[Mapping[str, Any]]) -> str | None:
    """The image of Volcano's admission webhook (else its controller manager) among
    ``deployments``, or ``None``."""
    images = [
        str(container.get("image") or "")
        for deployment in deployments
        for container in (
            (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
                "containers"
            )
            or ()
        )
    ]
    for component in VOLCANO_IMAGES:
        for image in images:
            if repository_and_tag(image)[0].rsplit("/", 1)[-1] == component:
                return image
    return None
