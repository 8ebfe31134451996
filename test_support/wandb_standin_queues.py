"""The W&B stand-in's Launch queues: a queue's resource config and its template variables.

``wandb.Api().run_queue(entity, name)`` reads a queue in two GraphQL queries, as wandb 0.31
sends them: ``GetRunQueueMetadata`` (the queue, in the entity's ``model-registry`` project,
with the id of its default resource config) and ``GetDefaultResourceConfig`` (the config, its
resource type and ``templateVariables { name schema }``, each schema a JSON string as W&B's
server stores it). A mixin of :class:`test_support.wandb_standin.WandbStandin`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

LAUNCH_PROJECT = "model-registry"  # where W&B keeps Launch queues (LAUNCH_DEFAULT_PROJECT)


@dataclass
class _Queue:
    queue_id: str
    entity: str
    name: str
    config: Any
    resource: str
    config_id: str | None
    template_variables: list[dict[str, Any]] = field(default_factory=list)


class LaunchQueues:
    """Queues by ``(entity, name)``, and by ``(entity, resource config id)``."""

    def _init_queues(self) -> None:
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._configs: dict[tuple[str, str], _Queue] = {}

    def add_queue(
        self,
        entity: str,
        name: str,
        *,
        config: Any,
        resource: str = "kubernetes",
        wrap: bool = True,
        template_variables: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Make a Launch queue known, with ``config`` as its default resource config.

        With ``wrap`` the config is stored the way ``Api.create_run_queue`` and the W&B UI
        store it, ``{"resource_args": {<resource>: config}}``, serialised as a JSON string.
        ``config=None`` makes a queue without a resource config. ``template_variables``: name
        -> schema (``{"type": "integer", "maximum": 8, ...}``), as the queue's admin declares
        them (``Api.create_run_queue(template_variables=...)``); served as W&B serves them.
        """
        index = len(self._queues) + 1
        config_id = None if config is None else str(100 + index)
        stored = config
        if config is not None and wrap:
            stored = json.dumps({"resource_args": {resource: config}})
        variables = [
            {"name": name, "schema": json.dumps(schema)}
            for name, schema in (template_variables or {}).items()
        ]
        queue = _Queue(f"UnVuUXVldWU6{index}", entity, name, stored, resource, config_id, variables)
        self._queues[(entity, name)] = queue
        if config_id is not None:
            self._configs[(entity, config_id)] = queue

    def _op_GetRunQueueMetadata(self, variables: dict[str, Any]) -> dict[str, Any]:
        if variables.get("projectName") != LAUNCH_PROJECT:
            return {"project": None}
        queue = self._queues.get((variables.get("entityName"), variables.get("runQueue")))  # type: ignore[arg-type]
        if queue is None:
            return {"project": {"runQueue": None}}
        run_queue = {
            "id": queue.queue_id,
            "access": "PROJECT",
            "defaultResourceConfigID": queue.config_id,
            "prioritizationMode": "DISABLED",
            "externalLinks": {},
        }
        return {"project": {"runQueue": run_queue}}

    def _op_GetDefaultResourceConfig(self, variables: dict[str, Any]) -> dict[str, Any]:
        queue = self._configs.get((variables.get("entityName"), str(variables.get("id"))))  # type: ignore[arg-type]
        if queue is None:
            return {"entity": {"defaultResourceConfig": None}}
        config = {
            "config": queue.config,
            "resource": queue.resource,
            "templateVariables": queue.template_variables,
        }
        return {"entity": {"defaultResourceConfig": config}}
