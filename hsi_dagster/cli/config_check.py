"""`hsi config check`: print the findings of cli/config_findings.py for the settings, and whether the model's
trust (MODEL_TRUST, core/verdict/trust.py) was measured.

The settings come from hsi.env and the environment.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hsi_dagster.cli.config_findings import Finding, check_config
from hsi_dagster.cli.frigate import profile_findings
from hsi_dagster.llm.gguf import read_metadata
from hsi_dagster.llm.model_files import model_path
from hsi_dagster.settings import HsiSettings


def add_config_check_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--env-file", default=None, help="settings file (default: HSI_ENV_FILE or hsi.env)")
    parser.add_argument("--model", default=None, help="GGUF whose header to check against (default: MODEL_PATH)")
    parser.add_argument("--no-model", action="store_true", help="skip the model-dependent checks")
    return parser


def run_config_check(args: argparse.Namespace) -> int:
    """Print the findings; 1 when any is an error, 2 when the settings do not even load, else 0."""
    from hsi_dagster.settings import SettingsError, load_settings

    try:
        settings = load_settings(args.env_file)
    except SettingsError as exc:
        print(f"ERROR   {exc}", file=sys.stderr)
        return 2
    meta = None
    extra: list[Finding] = []
    if not args.no_model:
        try:
            meta = read_metadata(Path(args.model) if args.model else model_path(settings.MODEL_PATH))
        except (OSError, ValueError) as exc:
            extra.append(Finding("warning", "MODEL_PATH", f"model checks skipped: cannot read the GGUF header ({exc})"))
    findings = extra + check_config(settings, meta) + trust_findings(settings)
    findings += [Finding(*finding) for finding in profile_findings(settings)]  # cameras without a profile
    for finding in findings:
        print(finding)
    if not findings:
        print("OK: no inconsistent settings found")
    return 1 if any(f.level == "error" for f in findings) else 0


def trust_findings(settings: HsiSettings) -> list[Finding]:
    """With MODEL_TRUST=auto: what was measured for the configured model (its served name, the schema and the quality
    level), in HSI_DUCKDB_PATH or shipped with hsi for the bundled model; else a warning naming the stated default
    that then applies. The size the server reports is checked against the record at run time (assets/assessments.py)."""
    from hsi_dagster.core.verdict.trust import AUTO, DEFAULT_TRUST
    from hsi_dagster.llm.options import short_model_name
    from hsi_dagster.storage.db import DatabaseNotFound, connect
    from hsi_dagster.storage.shipped_trust import shipped_origin, shipped_trust
    from hsi_dagster.storage.trust import measured_trust

    if settings.MODEL_TRUST != AUTO:
        return []
    name = settings.MODEL_ALIAS or short_model_name(str(model_path(settings.MODEL_PATH)))
    schema, quality = settings.ASSESSMENT_SCHEMA, settings.ENRICHMENT_QUALITY_LEVEL
    try:
        with connect(settings.HSI_DUCKDB_PATH, read_only=True) as conn:
            records = measured_trust(conn)
    except DatabaseNotFound:
        records = []
    wanted = (name, schema, quality)
    found = [r for r in records if (r["model"], r["schema"], r["quality_level"]) == wanted]
    if found:
        record = found[0]
        where = f"{record['configuration']}, {record['measured_at']:%Y-%m-%d}"
        return [
            Finding(
                "info", "MODEL_TRUST", f"auto: measured trust {record['trust']} for {record['fingerprint']} ({where})"
            )
        ]
    shipped = [r for r in shipped_trust() if (r["model"], r["schema"], r["quality_level"]) == wanted]
    if shipped:
        record = shipped[0]
        return [
            Finding(
                "info",
                "MODEL_TRUST",
                f"auto: measured trust {record['trust']} for {record['fingerprint']} ({shipped_origin(record)}); "
                "`hsi eval --split holdout` measures your own server and replaces it",
            )
        ]
    return [
        Finding(
            "warning",
            "MODEL_TRUST",
            f"auto: no measured trust for {name} ({schema} schema, {quality} quality) in "
            f"{settings.HSI_DUCKDB_PATH}: the stated default trust {DEFAULT_TRUST} applies (an unmeasured model "
            "may raise a batch the rules call low to high, an alert, but not to critical); measure it with "
            "`hsi eval --split holdout`",
        )
    ]
