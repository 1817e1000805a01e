"""Frigate's own `config.yml` (or `config.json`) read from disk: for the cameras' detect resolutions and zones.

The structure is interpreted by `core.frigate.config.detect_resolutions`; this module only reads and parses the file.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml

from hsi_dagster.core.frigate.config import DetectResolutions, FrigateConfigError, camera_groups, detect_resolutions


def load_frigate_config(path: str | os.PathLike[str]) -> Any:
    """Frigate's config file parsed (YAML, or JSON for a `.json` file); FrigateConfigError names the file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FrigateConfigError(f"cannot read the Frigate config {file}: {exc}") from None
    try:
        return json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise FrigateConfigError(
            f"the Frigate config {file} is not valid {file.suffix.lstrip('.') or 'YAML'}: {exc}"
        ) from None


def load_detect_resolutions(path: str | os.PathLike[str]) -> DetectResolutions:
    """Detect resolutions per camera from a Frigate config file; FrigateConfigError names the file and the key."""
    return detect_resolutions(load_frigate_config(path), origin=str(Path(path)))


def load_camera_groups(path: str | os.PathLike[str] | None) -> dict[str, tuple[str, ...]]:
    """Frigate's camera groups from its config file; {} without a path or when the file cannot be read (the groups
    only strengthen visit links: a missing file must not stop a batch)."""
    if not path:
        return {}
    try:
        return dict(_groups_of(str(path), Path(path).stat().st_mtime_ns))
    except (OSError, FrigateConfigError):
        return {}


@functools.lru_cache(maxsize=4)
def _groups_of(path: str, mtime_ns: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Parsed once per file version (each batch links a visit: YAML is not parsed per batch)."""
    return tuple(camera_groups(load_frigate_config(path)).items())
