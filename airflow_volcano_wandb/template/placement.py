"""Where the rendered job goes: its name, its namespace (and the rule on a template's own
namespace) and its Volcano queue, as :func:`~airflow_volcano_wandb.template.render_job`'s
``name``, ``namespace``, ``queue`` and ``template_namespace_allowed`` ask."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.options import keep_checked, option
from airflow_volcano_wandb.template.values import flag, show, type_name


@dataclass(frozen=True, kw_only=True)
class Placement:
    """The run's name, namespace and queue for the job; ``None`` keeps the template's."""

    namespace: str | None = option(
        None,
        """replaces ``metadata.namespace``. Without it, a namespace the template sets is an
        error unless ``template_namespace_allowed`` or ``allowed_namespaces`` is given.""",
    )
    name: str | None = option(
        None,
        """replaces ``metadata.name``. The name, like the template's, is made valid if it is
        not (see :func:`naming.fit_job_name`), so read the final name from the result.""",
    )
    queue: str | None = option(None, "replaces ``spec.queue``.")
    template_namespace_allowed: bool = option(
        False,
        """honour the template's ``metadata.namespace`` when no ``namespace`` is given, even
        without ``allowed_namespaces``.""",
        check=flag("template_namespace_allowed"),
    )

    def __post_init__(self) -> None:
        keep_checked(self)

    def apply(self, job: dict[str, Any], allowed_namespaces: Collection[str] | None) -> str:
        """Set the job's name, namespace and queue; return where the namespace came from,
        for the policy's messages."""
        if self.name is not None:
            if not isinstance(self.name, str) or not self.name:
                raise error_at(
                    ("name",),
                    "the job name override must be a non-empty string, not "
                    f"{type_name(self.name)} {show(self.name)}",
                )
            job["metadata"]["name"] = self.name
        source = self._set_namespace(job, allowed_namespaces)
        if self.queue is not None:
            if not isinstance(self.queue, str) or not self.queue:
                raise error_at(("queue",), f"must be a non-empty string, not {show(self.queue)}")
            job["spec"]["queue"] = self.queue
        return source

    def _set_namespace(
        self, job: dict[str, Any], allowed_namespaces: Collection[str] | None
    ) -> str:
        """The namespace rule (``docs/templates.md``): the argument always wins. A namespace
        from the template is a choice made by whoever edits the W&B queue, so it is honoured
        only when this deployment said so, by ``template_namespace_allowed`` or by an
        allow-list (which the policy then checks)."""
        if self.namespace is not None:
            if not isinstance(self.namespace, str):
                raise error_at(("namespace",), f"must be a string, not {type_name(self.namespace)}")
            job["metadata"]["namespace"] = self.namespace
            return "namespace="
        chosen = job["metadata"].get("namespace")
        if (
            chosen is not None
            and not self.template_namespace_allowed
            and allowed_namespaces is None
        ):
            raise error_at(
                ("metadata", "namespace"),
                f"the template chooses namespace {show(chosen)}, which it may not: pass "
                "namespace=, allowed_namespaces=[...] or template_namespace_allowed=True",
            )
        return "the template"
