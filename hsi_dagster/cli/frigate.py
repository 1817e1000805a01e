"""`hsi frigate import | listen | status | profiles`: Frigate's recorded or live events as detections (contract
section 5), and camera profiles proposed from Frigate's cameras and zones (`profiles`, core/frigate/profiles.py).

`listen` runs the listener of cli/frigate_listen.py (its session and batching rules are described there).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

from hsi_dagster.cli.frigate_listen import FrigateListener
from hsi_dagster.core.frigate.config import FrigateConfigError, detect_resolutions
from hsi_dagster.core.frigate.fields import Resolution
from hsi_dagster.core.intake.detections import Bounds
from hsi_dagster.settings import HsiSettings


class FrigateUsageError(Exception):
    """A bad argument or missing configuration: printed as one line by `hsi`, exit code 2."""


# ------------------------------------------------------------------------------------------------ resolutions
def read_frigate_config(
    settings: HsiSettings,
    config_path: str | None,
    why: str = "Frigate's boxes are in pixels of each camera's detect resolution",
) -> tuple[Any, str]:
    """Frigate's parsed configuration and where it came from: --frigate-config, else FRIGATE_CONFIG_PATH, else
    FRIGATE_URL/api/config. FrigateUsageError when none is given or it cannot be read."""
    path = config_path or settings.FRIGATE_CONFIG_PATH
    try:
        if path:
            from hsi_dagster.storage.frigate_config import load_frigate_config

            return load_frigate_config(path), str(path)
        if settings.FRIGATE_URL:
            from hsi_dagster.resources.frigate import FrigateApiError, FrigateResource

            api = FrigateResource.from_settings(settings)
            try:
                config = api.fetch_config()
            except FrigateApiError as exc:
                raise FrigateUsageError(str(exc)) from None
            from hsi_dagster.core.context.gateway_protocol import frigate_media_base

            return config, f"{frigate_media_base(api.base_url) or 'FRIGATE_URL'}/api/config"  # never its credentials
    except FrigateConfigError as exc:
        raise FrigateUsageError(str(exc)) from None
    raise FrigateUsageError(
        f"{why}: give --frigate-config (Frigate's config.yml), or set FRIGATE_CONFIG_PATH or FRIGATE_URL"
    )


def load_resolutions(settings: HsiSettings, config_path: str | None) -> dict[str, Resolution]:
    """Detect resolutions from --frigate-config, else FRIGATE_CONFIG_PATH, else FRIGATE_URL/api/config."""
    config, origin = read_frigate_config(settings, config_path)
    try:
        found = detect_resolutions(config, origin=origin)
    except FrigateConfigError as exc:
        raise FrigateUsageError(str(exc)) from None
    if found.unknown:
        print(
            f"hsi frigate: no detect resolution for camera(s) {', '.join(found.unknown)} (Frigate takes it from the "
            "stream): their MQTT events will be quarantined; set cameras.<name>.detect.width/height or use "
            "FRIGATE_URL (/api/config has it)",
            file=sys.stderr,
        )
    return found.by_camera


def _is_api_answer(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            head = file.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False  # the import names the unreadable file
    return head.startswith(b"[")


# ------------------------------------------------------------------------------------------------ import
def cmd_import(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.storage.frigate import import_frigate_files
    from hsi_dagster.storage.ingest import IngestError

    needs_resolutions = not all(_is_api_answer(p) for p in args.paths)  # an API answer's boxes are relative
    resolutions = load_resolutions(settings, args.frigate_config) if needs_resolutions else {}
    try:
        result = import_frigate_files(
            settings.HSI_DUCKDB_PATH, args.paths, resolutions=resolutions, bounds=Bounds.from_settings(settings)
        )
    except IngestError as exc:
        raise FrigateUsageError(str(exc)) from None
    print(result.summary())
    return 0


# ------------------------------------------------------------------------------------------------ listen
def cmd_listen(args: argparse.Namespace, settings: HsiSettings) -> int:
    resolutions = load_resolutions(settings, args.frigate_config)
    listener = FrigateListener(settings, settings.HSI_DUCKDB_PATH, resolutions, args.status_file)
    stop = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(
        f"hsi frigate listen: {listener.source} -> {settings.HSI_DUCKDB_PATH} (batches of up to "
        f"{settings.FRIGATE_BATCH_SIZE} messages or {settings.FRIGATE_BATCH_SECONDS:g} s)",
        flush=True,
    )
    listener.run(stop)
    status = listener.status
    print(
        f"hsi frigate listen: stopped; {status.received} received, {status.written} written, "
        f"{status.detections} detections, {status.quarantined} quarantined",
        flush=True,
    )
    return 0


# ------------------------------------------------------------------------------------------------ profiles
def cmd_profiles(args: argparse.Namespace, settings: HsiSettings) -> int:
    """Camera profiles proposed from Frigate's cameras and zones (core/frigate/profiles.py), to stdout or --out."""
    from hsi_dagster.core.frigate.profiles import frigate_timezone, propose_profiles, render_profiles

    if args.timezone is not None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(args.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise FrigateUsageError(f"--timezone {args.timezone!r} is not an IANA time zone (Europe/London)") from None
    config, origin = read_frigate_config(
        settings, args.frigate_config, "the profiles are proposed from Frigate's cameras and zones"
    )
    try:
        proposals = propose_profiles(config, origin=origin)
    except FrigateConfigError as exc:
        raise FrigateUsageError(str(exc)) from None
    timezone, source = args.timezone, "from --timezone"
    if timezone is None and (timezone := frigate_timezone(config)) is not None:
        source = "from Frigate's ui.timezone: EDIT if this camera's is another"
    text = render_profiles(proposals, origin=origin, timezone=timezone, timezone_source=source)
    if not args.out:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.out, "w" if args.force else "x", encoding="utf-8") as file:
            file.write(text)
    except FileExistsError:
        raise FrigateUsageError(f"{args.out} exists: give --force to overwrite it") from None
    except OSError as exc:
        raise FrigateUsageError(f"cannot write {args.out}: {exc}") from None
    roles = [guess.role for proposal in proposals for guess in proposal.zones]
    print(
        f"hsi frigate profiles: {len(proposals)} camera(s), {len(roles)} zone(s) ({roles.count('entry')} entry, "
        f"{roles.count('private')} private, {roles.count('public')} public, {roles.count(None)} not placed) -> "
        f"{args.out}: edit it, then set CAMERA_CONTEXT_PATH={args.out} and run `hsi config check`",
        file=sys.stderr,
    )
    return 0


def profile_findings(settings: HsiSettings) -> list[tuple[Literal["error", "warning", "info"], str, str]]:
    """`hsi config check`'s findings on camera profiles against Frigate's cameras (FRIGATE_CONFIG_PATH or
    FRIGATE_URL/api/config): per camera without a profile (or whose profile watches no zone Frigate reports), what
    the evidence floor will and will not raise there (core/verdict/coverage.py). (level, variable, message) tuples;
    nothing when no Frigate config is set."""
    from hsi_dagster.core.context.camera_profiles import CameraProfileError
    from hsi_dagster.core.frigate.profiles import frigate_camera_zones
    from hsi_dagster.core.verdict.coverage import camera_coverage
    from hsi_dagster.settings import load_camera_profiles

    if not (settings.FRIGATE_CONFIG_PATH or settings.FRIGATE_URL):
        return []
    variable = "FRIGATE_CONFIG_PATH" if settings.FRIGATE_CONFIG_PATH else "FRIGATE_URL"
    try:
        config, origin = read_frigate_config(settings, None)
        cameras = frigate_camera_zones(config, origin)
    except (FrigateUsageError, FrigateConfigError) as exc:
        return [("warning", variable, f"cameras without a profile not checked: {exc}")]
    profiles = {}
    if settings.CAMERA_CONTEXT_PATH:
        try:
            profiles = load_camera_profiles(settings.CAMERA_CONTEXT_PATH)
        except (CameraProfileError, OSError):
            return []  # the prompt-floor check reports the file
    findings: list[tuple[Literal["error", "warning", "info"], str, str]] = []
    for camera_id, zones in cameras.items():
        coverage = camera_coverage(
            camera_id, profiles.get(camera_id), zones, vision_models=settings.ENRICHMENT_BACKEND == "http"
        )
        if coverage is not None:
            findings.append(("warning", "CAMERA_CONTEXT_PATH", coverage.message()))
    return findings


# ------------------------------------------------------------------------------------------------ status
def cmd_status(args: argparse.Namespace, settings: HsiSettings) -> int:
    """Exit 0 when the listener's status file is fresh and it is connected (the compose health check)."""
    try:
        status = json.loads(Path(args.status_file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"hsi frigate status: no status at {args.status_file}: {exc}", file=sys.stderr)
        return 1
    age = time.time() - float(status.get("updated_at", 0))
    print(json.dumps({**status, "age_seconds": round(age, 1)}))
    return 0 if status.get("connected") and age <= args.max_age else 1


def add_frigate_parser(sub: Any, with_db: Any) -> None:
    """`hsi frigate ...` on the one argparse tree of cli/main.py."""
    frigate = sub.add_parser("frigate", help="Frigate NVR input (MQTT events, /api/events)")
    commands = frigate.add_subparsers(dest="frigate_command", required=True)
    p = with_db(commands.add_parser("import", help="load recorded MQTT payloads (JSON Lines) or an /api/events answer"))
    p.add_argument("paths", nargs="+", metavar="FILE")
    p.add_argument("--frigate-config", metavar="CONFIG", help="Frigate's config.yml (default: FRIGATE_CONFIG_PATH)")
    p.set_defaults(frigate_func=cmd_import)
    p = with_db(commands.add_parser("listen", help="subscribe to Frigate's MQTT events (QoS 1, persistent session)"))
    p.add_argument("--frigate-config", metavar="CONFIG", help="Frigate's config.yml (default: FRIGATE_CONFIG_PATH)")
    p.add_argument("--status-file", metavar="FILE", help="write the listener's status here every few seconds")
    p.set_defaults(frigate_func=cmd_listen)
    p = commands.add_parser(
        "profiles", help="propose camera profiles from Frigate's cameras and zones (to stdout or --out FILE)"
    )
    p.add_argument("--frigate-config", metavar="CONFIG", help="Frigate's config.yml (default: FRIGATE_CONFIG_PATH)")
    p.add_argument("--out", metavar="FILE", help="write the proposal here (refused when FILE exists, unless --force)")
    p.add_argument("--force", action="store_true", help="overwrite --out FILE")
    p.add_argument("--timezone", metavar="TZ", help="the cameras' IANA time zone (default: Frigate's ui.timezone)")
    p.set_defaults(frigate_func=cmd_profiles)
    p = commands.add_parser("status", help="exit 0 if a listener's status file is fresh and connected")
    p.add_argument("--status-file", metavar="FILE", required=True)
    p.add_argument("--max-age", type=float, default=30.0, metavar="SECONDS")
    p.set_defaults(frigate_func=cmd_status)
