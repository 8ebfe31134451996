"""A W&B run through ``wandb.Api``: its summary, its config, tags and notes, its artifacts, and
whether it exists, for :class:`~airflow_volcano_wandb.hooks.wandb.WandbHook` (which mixes this
in and provides ``api``, the connection's ``entity`` and ``project``, and ``deadline``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from typing import Any

from airflow_volcano_wandb.wandb.deadline import call_within
from airflow_volcano_wandb.wandb.wandb_backlink import RunFields
from airflow_volcano_wandb.wandb.wandb_run import ArtifactRef


def _within_deadline(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a public-API method under the hook's ``deadline``, when it has one."""

    @functools.wraps(method)
    def bounded(self: WandbRunAccess, *args: Any, **kwargs: Any) -> Any:
        if self.deadline is None:
            return method(self, *args, **kwargs)
        return call_within(self.deadline, method, self, *args, **kwargs)

    return bounded


# Summary keys the SDK writes for its own bookkeeping; not metrics a DAG gates on.
_INTERNAL_SUMMARY_KEYS = frozenset({"_wandb"})


class WandbRunAccess:
    """The hook's run reads and writes, each under the hook's ``deadline`` when it has one.

    Each method takes ``run_id`` (the W&B run id), ``entity`` (the run's entity; defaults to
    the connection's, then the API key's user) and ``project`` (defaults to the connection's;
    ``ValueError`` when none is known).
    """

    api: Any
    deadline: float | None
    wandb_conn_id: str | None
    log: Any
    _summaries_read: set[str]

    @property
    def entity(self) -> str | None:
        """The connection's default entity (the hook reads its extras)."""
        ...

    @property
    def project(self) -> str | None:
        """The connection's default project (the hook reads its extras)."""
        ...

    @_within_deadline
    def get_run_summary(
        self,
        run_id: str,
        *,
        entity: str | None = None,
        project: str | None = None,
        keys: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Return the summary metrics of a run (its last logged value per key) as W&B has
        them now, whether or not this hook read them before.

        :param keys: Only these summary keys (e.g. ``["eval/accuracy"]``). Keys the run does
            not have are left out of the result and logged as a warning, so a caller gating on
            a metric sees it is missing instead of a made-up value.
        :return: A JSON-compatible dict; the SDK's internal ``_wandb`` entry is dropped.
        :raises wandb.errors.CommError: when the server does not know the run.
        """
        path = self._run_path(run_id, entity, project)
        run = self.api.run(path)
        if path in self._summaries_read:  # wandb.Api answers a run it loaded from its cache
            run.load(force=True)
        self._summaries_read.add(path)
        # Round-trip through JSON: the SDK hands back its own dict/list wrappers, and the
        # result goes to XCom.
        summary = json.loads(json.dumps(dict(run.summary_metrics), default=str))
        summary = {k: v for k, v in summary.items() if k not in _INTERNAL_SUMMARY_KEYS}
        if keys is None:
            return summary
        wanted = list(dict.fromkeys(keys))
        missing = [key for key in wanted if key not in summary]
        if missing:
            self.log.warning(
                "W&B run %s has no summary value for %s (it has: %s)",
                path,
                ", ".join(missing),
                ", ".join(sorted(summary)) or "nothing",
            )
        return {key: summary[key] for key in wanted if key in summary}

    @_within_deadline
    def get_run_history(
        self,
        run_id: str,
        *,
        entity: str | None = None,
        project: str | None = None,
        samples: int = 500,
    ) -> list[dict[str, Any]]:
        """The rows a run logged, in step order (``Run.history``: at most ``samples`` of them,
        sampled by W&B as its own charts are), each JSON-compatible with its ``_step`` and
        ``_timestamp``; call after :meth:`get_run_summary` for a fresh read of a known run.

        :raises wandb.errors.CommError: when the server does not know the run.
        """
        run = self.api.run(self._run_path(run_id, entity, project))
        rows = run.history(samples=samples, pandas=False)
        return json.loads(json.dumps(list(rows), default=str))

    @_within_deadline
    def edit_run(
        self,
        run_id: str,
        *,
        entity: str | None = None,
        project: str | None = None,
        edit: Callable[[RunFields], RunFields],
    ) -> None:
        """Read a run's config, tags and notes, let ``edit`` change them, and write them back.

        Through the public API's ``Run.update()`` (GraphQL ``upsertBucket``), which also
        writes back the summary it read: call this when the run is no longer being written,
        e.g. when the task ends.

        :param edit: Gets the run's fields, returns them as they should be.
        :raises wandb.errors.CommError: when the server does not know the run.
        """
        run = self.api.run(self._run_path(run_id, entity, project))
        fields = edit(RunFields(dict(run.config), list(run.tags or []), run.notes))
        run.config.clear()
        run.config.update(fields.config)
        run.tags, run.notes = list(fields.tags), fields.notes
        run.update()

    @_within_deadline
    def run_artifacts(
        self, run_id: str, *, entity: str | None = None, project: str | None = None
    ) -> tuple[list[ArtifactRef], list[ArtifactRef]]:
        """The artifact versions a run used and logged (``Run.used_artifacts()`` and
        ``Run.logged_artifacts()``), each as ``<entity>/<project>/<name>:v<n>`` and its type."""
        run = self.api.run(self._run_path(run_id, entity, project))
        return (
            [ArtifactRef(a.qualified_name, a.type) for a in run.used_artifacts()],
            [ArtifactRef(a.qualified_name, a.type) for a in run.logged_artifacts()],
        )

    @_within_deadline
    def run_exists(
        self, run_id: str, *, entity: str | None = None, project: str | None = None
    ) -> bool:
        """Whether W&B has the run: False when the server says it does not (a run whose
        trainer never reached ``wandb.init``); any other failure is raised, never taken for
        an answer."""
        from wandb.apis.public.runs import RunNotFoundError

        try:
            self.api.run(self._run_path(run_id, entity, project)).load()
        except Exception as exc:
            # The SDK wraps the not-found answer in a CommError, as it does a lost connection.
            if isinstance(exc, RunNotFoundError) or isinstance(
                getattr(exc, "exc", None), RunNotFoundError
            ):
                return False
            raise
        return True

    @_within_deadline
    def run_stopped(
        self, run_id: str, *, entity: str | None = None, project: str | None = None
    ) -> bool:
        """Whether the run was stopped from the W&B UI or API: the GraphQL ``RunStoppedStatus``
        query W&B Launch's agent polls; ``False`` for a run the server does not know."""
        entity, project = self._where(entity, project)
        variables = {"projectName": project, "entityName": entity, "runId": run_id}
        answer = _graphql(self.api, _RUN_STOPPED_STATUS, variables)
        run = (answer.get("project") or {}).get("run") or {}
        return bool(run.get("stopped"))

    def _where(self, entity: str | None, project: str | None) -> tuple[str | None, str]:
        entity, project = entity or self.entity, project or self.project
        if not project:
            raise ValueError(
                "a W&B run needs a project: pass project= or set the 'project' extra "
                f"of connection {self.wandb_conn_id!r}"
            )
        return entity, project

    def _run_path(self, run_id: str, entity: str | None, project: str | None) -> str:
        entity, project = self._where(entity, project)
        return f"{entity}/{project}/{run_id}" if entity else f"{project}/{run_id}"


#: What W&B Launch's agent asks of a run it launched (``LaunchApi.check_stop_requested``).
_RUN_STOPPED_STATUS = """
query RunStoppedStatus($projectName: String, $entityName: String, $runId: String!) {
    project(name: $projectName, entityName: $entityName) {
        run(name: $runId) {
            stopped
        }
    }
}
"""


def _graphql(api: Any, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    """A GraphQL query the public API has no method for, sent as its own queries are: through
    wandb-core where the API sends them there (as wandb 0.31's does), else through its GraphQL
    client."""
    service = getattr(api, "_service_api", None)
    if service is not None:
        return service.execute_graphql(query, variables)
    from wandb_gql import gql

    return api.client.execute(gql(query), variable_values=variables)
