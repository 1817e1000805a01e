"""`hsi config check`: print the findings of cli/config_findings.py for the settings.

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
    findings = extra + check_config(settings, meta)
    findings += [Finding(*finding) for finding in profile_findings(settings)]  # cameras without a profile
    for finding in findings:
        print(finding)
    if not findings:
        print("OK: no inconsistent settings found")
    return 1 if any(f.level == "error" for f in findings) else 0
