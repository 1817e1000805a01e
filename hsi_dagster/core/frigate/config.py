"""Detect resolutions per camera from Frigate's configuration (a parsed `config.yml` or `/api/config`): what
turns Frigate's pixel boxes into the contract's relative ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hsi_dagster.core.frigate.fields import Resolution, show_value


class FrigateConfigError(ValueError):
    """Frigate's configuration cannot give detect resolutions; the message names the file or key."""


@dataclass(frozen=True)
class DetectResolutions:
    """`cameras.<name>.detect.width/height` (falling back to the top-level `detect`), per camera; `unknown` lists
    cameras whose resolution Frigate takes from the stream at run time (its `/api/config` has them)."""

    by_camera: dict[str, Resolution]
    unknown: tuple[str, ...] = ()


def _dimension(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FrigateConfigError(f"{where}: must be a whole number of pixels > 0, got {show_value(value)}")
    return value


def detect_resolutions(config: Any, origin: str = "Frigate config") -> DetectResolutions:
    """Detect resolutions from a parsed Frigate `config.yml` or an `/api/config` answer (same structure)."""
    if not isinstance(config, dict):
        raise FrigateConfigError(f"{origin}: must be a mapping with a `cameras` section, got {show_value(config)}")
    cameras = config.get("cameras")
    if not isinstance(cameras, dict) or not cameras:
        raise FrigateConfigError(f"{origin}: no `cameras` section (cameras.<name>.detect.width/height)")
    top: dict[str, Any] = config["detect"] if isinstance(config.get("detect"), dict) else {}
    default_w = _dimension(top.get("width"), f"{origin}: detect.width")
    default_h = _dimension(top.get("height"), f"{origin}: detect.height")
    found: dict[str, Resolution] = {}
    unknown: list[str] = []
    for name, camera in cameras.items():
        detect: dict[str, Any] = {}
        if isinstance(camera, dict) and isinstance(camera.get("detect"), dict):
            detect = camera["detect"]
        width = _dimension(detect.get("width"), f"{origin}: cameras.{name}.detect.width") or default_w
        height = _dimension(detect.get("height"), f"{origin}: cameras.{name}.detect.height") or default_h
        if width and height:
            found[str(name)] = (width, height)
        else:
            unknown.append(str(name))
    return DetectResolutions(found, tuple(unknown))


def camera_groups(config: Any) -> dict[str, tuple[str, ...]]:
    """Frigate's `camera_groups` (name -> `cameras`, a list or a comma-separated string) from a parsed config;
    {} when there are none. Only cameras named under `cameras` count (Frigate also allows `birdseye`); a malformed
    group is skipped, never fatal: the groups only strengthen visit links (core/visits/adjacency.py)."""
    if not isinstance(config, dict) or not isinstance(config.get("camera_groups"), dict):
        return {}
    known = set(config["cameras"]) if isinstance(config.get("cameras"), dict) else None
    groups: dict[str, tuple[str, ...]] = {}
    for name, group in config["camera_groups"].items():
        members = group.get("cameras") if isinstance(group, dict) else None
        if isinstance(members, str):
            members = [part.strip() for part in members.split(",")]
        if not isinstance(members, list):
            continue
        cameras = tuple(sorted({str(m) for m in members if isinstance(m, str) and m and (known is None or m in known)}))
        if len(cameras) >= 2:
            groups[str(name)] = cameras
    return groups
