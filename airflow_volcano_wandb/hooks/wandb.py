"""Airflow hook for Weights & Biases: the ``wandb`` connection type and W&B's public API.

Connection fields: password = API key, host = base URL (empty for W&B's cloud), extras
``entity`` and ``project`` (defaults for runs and queues). See ``docs/wandb.md``.

Reading from W&B (run summaries, Launch queue configs) goes through the ``wandb`` package's
public API (``wandb.Api``), imported lazily so that DAG parsing and the triggerer never load it.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import AirflowNotFoundException, BaseHook, mask_secret
from airflow_volcano_wandb.template import TemplateError, load_template
from airflow_volcano_wandb.wandb.connection_form import WANDB_CONN_FIELDS, WANDB_UI_FIELD_BEHAVIOUR
from airflow_volcano_wandb.wandb.deadline import call_within
from airflow_volcano_wandb.wandb.key_forms import key_forms
from airflow_volcano_wandb.wandb.wandb_backlink import RunFields
from airflow_volcano_wandb.wandb.wandb_queue_ref import parse_queue_ref
from airflow_volcano_wandb.wandb.wandb_run import ArtifactRef
from airflow_volcano_wandb.wandb.wandb_urls import is_default_base_url, run_url

if TYPE_CHECKING:
    from airflow.sdk import Connection

__all__ = ["WANDB_CONN_FIELDS", "WANDB_UI_FIELD_BEHAVIOUR", "WandbHook"]


def _mask(api_key: str | None) -> None:
    """Mask the key in this process's logs, in every form a log may show it (``key_forms``:
    plain, base64, and the W&B client's ``Basic`` credentials).

    Airflow masks connection passwords it loads itself, plain only; masking again covers keys
    that reached the hook some other way (a preset connection in tests, a custom backend). The
    base64 form is how a Secret carries the key in an API response or a DEBUG log of one; the
    ``Basic`` form is what a trainer's HTTP debug log prints.
    """
    for form in key_forms(api_key) if api_key else ():
        mask_secret(form, name="WANDB_API_KEY")


def _within_deadline(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a public-API method under the hook's ``deadline``, when it has one."""

    @functools.wraps(method)
    def bounded(self: WandbHook, *args: Any, **kwargs: Any) -> Any:
        if self.deadline is None:
            return method(self, *args, **kwargs)
        return call_within(self.deadline, method, self, *args, **kwargs)

    return bounded


# Summary keys the SDK writes for its own bookkeeping; not metrics a DAG gates on.
_INTERNAL_SUMMARY_KEYS = frozenset({"_wandb"})


class WandbHook(BaseHook):
    """Talk to Weights & Biases with the credentials of an Airflow ``wandb`` connection.

    A missing connection is not an error: the hook logs a warning and behaves as an empty
    connection (no API key, W&B's default server, no default entity/project). That keeps
    offline runs (``WANDB_MODE=offline``) free of any W&B setup; the methods that do need the
    server then fail inside ``wandb`` with its own "no API key" error, unless the worker has
    ``WANDB_API_KEY`` or a ``~/.netrc`` entry, which ``wandb.Api`` uses as usual.

    :param wandb_conn_id: The connection id; ``None`` means "no connection, use defaults".
    :param timeout: HTTP timeout in seconds for W&B API calls (``None``: the SDK's default).
    :param deadline: wall-clock bound in seconds on each run read or write
        (:meth:`get_run_summary`, :meth:`edit_run`, :meth:`run_artifacts`), retries included:
        the SDK retries past ``timeout``. ``None``: unbounded. See ``deadline.call_within``.
    """

    conn_name_attr = "wandb_conn_id"
    default_conn_name = "wandb_default"
    conn_type = "wandb"
    hook_name = "Weights & Biases"

    def __init__(
        self,
        wandb_conn_id: str | None = default_conn_name,
        *,
        timeout: int | None = None,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.wandb_conn_id = wandb_conn_id
        self.timeout = timeout
        self.deadline = deadline

    # -- connection form -------------------------------------------------------------------

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Return the extra fields of the connection form (entity, project)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField

        return {
            name: StringField(
                lazy_gettext(field["label"]),
                widget=BS3TextFieldWidget(),
                description=field["description"],
            )
            for name, field in WANDB_CONN_FIELDS.items()
        }

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return which standard fields the connection form hides and how it labels the rest."""
        return {
            "hidden_fields": list(WANDB_UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(WANDB_UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(WANDB_UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    # -- connection values -----------------------------------------------------------------

    @cached_property
    def connection(self) -> Connection | None:
        """The Airflow connection, or ``None`` when it is not defined (see the class doc)."""
        if not self.wandb_conn_id:
            return None
        try:
            conn = self.get_connection(self.wandb_conn_id)
        except AirflowNotFoundException:
            self.log.warning(
                "W&B connection %r is not defined; using defaults (W&B cloud, no API key, "
                "no default entity or project). That is fine for offline runs.",
                self.wandb_conn_id,
            )
            return None
        _mask(conn.password)
        return conn

    def mask_api_key(self) -> str | None:
        """Register the connection's key with this process's log masker, quietly; the key
        (``None``: no connection, or no key in it).

        For processes that never use the key but print what pods print: a resumed deferred
        task or a sensor tailing the log of a trainer that echoes its environment. A missing
        connection is no warning here: there is then no key to hide.
        """
        if not self.wandb_conn_id:
            return None
        if "connection" in self.__dict__:  # already loaded, and masked
            return self.api_key
        from airflow_volcano_wandb.airflow_compat import AirflowNotFoundException

        with contextlib.suppress(AirflowNotFoundException):
            key = self.get_connection(self.wandb_conn_id).password
            _mask(key)
            return key or None
        return None

    @property
    def api_key(self) -> str | None:
        """The API key (the connection password), registered with the log masker."""
        conn = self.connection
        return conn.password if conn is not None and conn.password else None

    @property
    def base_url(self) -> str | None:
        """The W&B API address, or ``None`` for W&B's default server.

        A host with a scheme is used as written; a bare host name means ``https://<host>``
        (with the connection port, if any). The cloud address counts as "default".
        """
        conn = self.connection
        if conn is None or not conn.host or not conn.host.strip():
            return None
        host = conn.host.strip().rstrip("/")
        if "://" not in host:
            host = f"https://{host}" + (f":{conn.port}" if conn.port else "")
        return None if is_default_base_url(host) else host

    @property
    def entity(self) -> str | None:
        """Default entity from the connection extras."""
        return self._extra("entity")

    @property
    def project(self) -> str | None:
        """Default project from the connection extras."""
        return self._extra("project")

    def _extra(self, name: str) -> str | None:
        conn = self.connection
        if conn is None:
            return None
        extras = conn.extra_dejson
        # Older connection forms stored custom fields as extra__<conn_type>__<name>.
        value = extras.get(name) or extras.get(f"extra__{self.conn_type}__{name}")
        if value is None:
            return None
        return str(value).strip() or None

    def run_url(self, run_id: str, *, entity: str | None = None, project: str | None = None) -> str:
        """Return the UI address of a run, using the connection's server and defaults."""
        entity, project = entity or self.entity, project or self.project
        if not entity or not project:
            raise ValueError("a W&B run URL needs an entity and a project")
        return run_url(self.base_url, entity, project, run_id)

    # -- W&B public API --------------------------------------------------------------------

    def get_conn(self) -> Any:
        """Return a ``wandb.Api`` client for this connection.

        Creating it verifies the API key with the server (one GraphQL ``viewer`` query) and
        starts the SDK's ``wandb-core`` helper process on first use in this process.
        """
        import wandb

        overrides: dict[str, Any] = {}
        if self.base_url:
            overrides["base_url"] = self.base_url
        if self.entity:
            overrides["entity"] = self.entity
        if self.project:
            overrides["project"] = self.project
        kwargs: dict[str, Any] = {"overrides": overrides}
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        if self.api_key:
            kwargs["api_key"] = self.api_key
        return wandb.Api(**kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """Check the API key with the server (the connection form's "Test" button)."""
        try:
            api = self.get_conn()
            return True, f"Connected to W&B as {api.default_entity!r}"
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"

    @cached_property
    def api(self) -> Any:
        """A cached ``wandb.Api`` client (see :meth:`get_conn`)."""
        return self.get_conn()

    @_within_deadline
    def get_run_summary(
        self,
        run_id: str,
        *,
        entity: str | None = None,
        project: str | None = None,
        keys: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Return the summary metrics of a run (its last logged value per key).

        :param run_id: The W&B run id.
        :param entity: The run's entity; defaults to the connection's, then the API key's user.
        :param project: The run's project; defaults to the connection's.
        :param keys: Only these summary keys (e.g. ``["eval/accuracy"]``). Keys the run does
            not have are left out of the result and logged as a warning, so a caller gating on
            a metric sees it is missing instead of a made-up value.
        :return: A JSON-compatible dict; the SDK's internal ``_wandb`` entry is dropped.
        :raises ValueError: when no project is known.
        :raises wandb.errors.CommError: when the server does not know the run.
        """
        entity, project = entity or self.entity, project or self.project
        if not project:
            raise ValueError(
                "get_run_summary needs a project: pass project= or set the 'project' extra "
                f"of connection {self.wandb_conn_id!r}"
            )
        path = f"{entity}/{project}/{run_id}" if entity else f"{project}/{run_id}"
        run = self.api.run(path)
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

        :param run_id: The W&B run id.
        :param entity: The run's entity; defaults to the connection's, then the API key's user.
        :param project: The run's project; defaults to the connection's.
        :param edit: Gets the run's fields, returns them as they should be.
        :raises ValueError: when no project is known.
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
        ``Run.logged_artifacts()``), each as ``<entity>/<project>/<name>:v<n>`` and its type.

        :param run_id: The W&B run id.
        :param entity: The run's entity; defaults to the connection's, then the API key's user.
        :param project: The run's project; defaults to the connection's.
        """
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
        an answer.

        :param run_id: The W&B run id.
        :param entity: The run's entity; defaults to the connection's, then the API key's user.
        :param project: The run's project; defaults to the connection's.
        """
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

    def _run_path(self, run_id: str, entity: str | None, project: str | None) -> str:
        entity, project = entity or self.entity, project or self.project
        if not project:
            raise ValueError(
                "a W&B run needs a project: pass project= or set the 'project' extra "
                f"of connection {self.wandb_conn_id!r}"
            )
        return f"{entity}/{project}/{run_id}" if entity else f"{project}/{run_id}"

    def get_queue_template(self, entity: str | None, queue_name: str) -> dict[str, Any]:
        """Return the resource config (the Volcano Job template) of a W&B Launch queue.

        A Kubernetes queue stores ``{"resource_args": {"kubernetes": <job spec>}}``; the job
        spec is returned, macros such as ``${run_id}`` untouched, for the template renderer.

        :param entity: The queue's entity; ``None`` uses the connection's.
        :param queue_name: The queue's name.
        :raises ValueError: when the queue has no resource config or is not a Kubernetes
            queue, or the config is not a mapping.
        """
        entity = entity or self.entity
        if not entity:
            raise ValueError("a W&B Launch queue needs an entity (argument or connection)")
        where = f"{entity}/{queue_name}"
        queue = self.api.run_queue(entity, queue_name)
        try:
            queue.access  # noqa: B018 - loads the queue's metadata (one GraphQL query)
        except Exception as exc:  # wandb wraps "no such queue" as CommError(TypeError)
            raise ValueError(f"W&B Launch queue {where} not found or not readable: {exc}") from exc
        # wandb (0.31) asks the server for the config even when the metadata says the queue has
        # none (a null id), so check first; the attribute is private, hence the getattr.
        if getattr(queue, "_default_resource_config_id", "unknown") is None:
            raise ValueError(f"W&B Launch queue {where} has no resource config")
        config = queue.default_resource_config
        resource = queue.type if config else None  # arrives with the config, no extra query
        return _job_spec_from_queue_config(config, resource, where)

    def get_template(self, ref: str) -> dict[str, Any]:
        """Load a template from a ``wandb-queue://<entity>/<queue>`` reference."""
        parsed = parse_queue_ref(ref)
        return self.get_queue_template(parsed.entity, parsed.queue)


def _job_spec_from_queue_config(config: Any, resource: str | None, where: str) -> dict[str, Any]:
    """Check a queue's stored resource config is a Kubernetes one, and load it.

    The parsing (YAML or JSON text, the ``resource_args.kubernetes`` wrapper) is the
    template loader's, the one place queue configs are read.
    """
    if not config:
        raise ValueError(f"W&B Launch queue {where} has no resource config")
    if resource and resource != "kubernetes":
        raise ValueError(
            f"W&B Launch queue {where} is a {resource!r} queue; only Kubernetes queues hold a "
            "Volcano Job template"
        )
    try:
        return load_template(config.decode() if isinstance(config, bytes) else config)
    except TemplateError as exc:
        raise TemplateError(f"W&B Launch queue {where}: {exc}") from None
