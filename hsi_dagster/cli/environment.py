"""The one place where `hsi` sets environment variables: values for the pipeline processes it starts.

`hsi process` and `hsi demo` run batches in worker processes that load `hsi_dagster.definitions`, which reads the
settings as every Dagster process does: the environment over `hsi.env`. A value the command decides itself
(`--db FILE`, the demo's database and camera profiles, the URL of the server it started, DAGSTER_HOME) goes into
the environment, the top of that precedence, so that the workers see it. LLAMA_API_KEY and ALERT_WEBHOOK_URL from
`hsi.env` go there too: Dagster resources take secrets from the environment only (`dg.EnvVar`). Package code
outside `cli/` never writes the environment.
"""

from __future__ import annotations

import os

from hsi_dagster.settings import HsiSettings, load_settings


def export(**values: str | None) -> None:
    """Set each value (None: leave the variable as it is) for this process and the processes it starts."""
    for name, value in values.items():
        if value is not None:
            os.environ[name] = value


def settings_with(**values: str | None) -> HsiSettings:
    """`export(**values)`, then the settings, with the secrets (API key, webhook URL) exported for the workers'
    dg.EnvVar."""
    export(**values)
    settings = load_settings()
    if settings.api_key and not os.environ.get("LLAMA_API_KEY"):
        export(LLAMA_API_KEY=settings.api_key)
    if settings.alert_webhook_url and not os.environ.get("ALERT_WEBHOOK_URL"):
        export(ALERT_WEBHOOK_URL=settings.alert_webhook_url)
    return settings
