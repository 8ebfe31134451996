"""Where the rendered job goes: its name, its namespace (and the rule on a template's own
namespace) and its Volcano queue, as :func:`~airflow_volcano_wandb.template.render_job`'s
``name``, ``namespace``, ``queue`` and ``template_namespace_allowed`` ask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template.errors import TemplateError, error_at
from airflow_volcano_wandb.template.values import show, type_name


@dataclass(frozen=True)
class Placement:
    """The run's name, namespace and queue for the job; ``None`` keeps the template's."""

    name: Any = None
    namespace: Any = None
    queue: Any = None
    #: A namespace the template names is honoured (else only with an allow-list).
    template_namespace_allowed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.template_namespace_allowed, bool):
            raise TemplateError("template_namespace_allowed must be True or False")

    def apply(self, job: dict[str, Any], allowed_namespaces: tuple[str, ...] | None) -> str:
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
        self, job: dict[str, Any], allowed_namespaces: tuple[str, ...] | None
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
