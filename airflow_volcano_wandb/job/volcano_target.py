"""Which Volcano release jobs are rendered for: the ``[volcano_wandb] volcano_version`` option.

Volcano's admission webhook refuses a job naming a plugin its release lacks, so the renderer
adds only the plugins of this release (``template/plugins.py``), and ``doctor`` compares it
with the release the cluster runs. Read by the operator when it renders, and by ``doctor``.
"""

from __future__ import annotations

from airflow.configuration import conf

from airflow_volcano_wandb.template import DEFAULT_VOLCANO_VERSION


def configured_volcano_version() -> str:
    """The configured target release, or the one the provider is tested with when unset."""
    # The fallback is the declared default (get_provider_info), which Airflow reads first.
    configured = conf.get("volcano_wandb", "volcano_version", fallback=DEFAULT_VOLCANO_VERSION)
    return (configured or "").strip() or DEFAULT_VOLCANO_VERSION
