"""Camera profiles proposed from Frigate's configuration (`hsi frigate profiles`): a sensible start for a household
that has Frigate's cameras and zones but no profiles. Pure: the parsed config in, profile text out.

A zone's role is guessed from its NAME only (hsi cannot see where it is drawn). The name is split into words
(`front_door`, `FrontDoor`, `front-door`, `frontdoor`, `door2` -> front, door); a word matches a vocabulary word
exactly, as a plural (`steps`, `porches`), or as a compound of a known modifier and that word (`backyard`,
`sidegate`; not `outdoor`). Then, in this order:
- a word of `NOT_OURS` (neighbour, public) -> public: someone else's door or garden is not the household's;
- a word of `ENTRY_WORDS` (door, gate, porch, step, window, garage...) -> entry (a way into the house, whatever
  else the name says: a garden gate is a gate);
- words of both `PRIVATE_WORDS` and `PUBLIC_WORDS` (`street_driveway`) -> not placed: the user decides;
- a word of `PRIVATE_WORDS` (garden, yard, driveway, patio, lawn, path...) -> private (the household's ground);
- a word of `PUBLIC_WORDS` (street, sidewalk, pavement, road...) -> public (not watched: passers-by are routine);
- nothing matched -> not placed.
Entry and private zones are the ones the evidence floor watches (a stranger there at night, loitering); a zone in
neither list is reported but not watched. The proposal says all this in comments for the user to edit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hsi_dagster.core.frigate.config import FrigateConfigError
from hsi_dagster.core.frigate.fields import show_value

Role = Literal["entry", "private", "public"]

ENTRY_WORDS = frozenset(
    {
        "door",
        "doorway",
        "doorstep",
        "doorbell",
        "entrance",
        "entry",
        "entryway",
        "gate",
        "gateway",
        "porch",
        "step",
        "stoop",
        "stair",
        "window",
        "garage",
        "hatch",
        "letterbox",
        "threshold",
    }
)
PRIVATE_WORDS = frozenset(
    {
        "garden",
        "yard",
        "backyard",
        "frontyard",
        "courtyard",
        "driveway",
        "drive",
        "patio",
        "lawn",
        "deck",
        "decking",
        "terrace",
        "balcony",
        "path",
        "pathway",
        "walkway",
        "shed",
        "carport",
        "apron",
        "pool",
        "fence",
        "hedge",
    }
)
PUBLIC_WORDS = frozenset(
    {
        "street",
        "sidewalk",
        "pavement",
        "road",
        "roadside",
        "lane",
        "alley",
        "alleyway",
        "footpath",
        "kerb",
        "curb",
        "crosswalk",
        "crossing",
        "verge",
        "highway",
        "avenue",
    }
)
NOT_OURS = frozenset({"neighbour", "neighbor", "public"})
# Words that may prefix a vocabulary word in one token (`frontdoor`, `backgarden`, `sidegate`), besides the
# vocabulary words themselves (`gardengate`, `garagedoor`).
MODIFIERS = frozenset(
    {
        "front",
        "back",
        "rear",
        "side",
        "main",
        "north",
        "south",
        "east",
        "west",
        "left",
        "right",
        "upper",
        "lower",
        "top",
        "bottom",
        "inner",
        "outer",
        "house",
        "home",
        "kitchen",
        "cellar",
        "basement",
        "french",
        "sliding",
        "service",
        "utility",
        "car",
        "bike",
        "bin",
    }
)
_VOCABULARY: dict[str, str] = {
    **{word: "public" for word in PUBLIC_WORDS},
    **{word: "private" for word in PRIVATE_WORDS},
    **{word: "entry" for word in ENTRY_WORDS},
    **{word: "not_ours" for word in NOT_OURS},
}
_PREFIXES = MODIFIERS | frozenset(_VOCABULARY)
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none"})
PROFILE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # CameraProfile.camera_id
MAX_ZONE_CHARS = 64  # CameraProfile's ZoneName
MAX_ZONES = 50  # CameraProfile.zones


@dataclass(frozen=True)
class ZoneGuess:
    zone: str
    role: Role | None  # None: not placed
    why: str  # the words that decided, or why it was not placed


@dataclass(frozen=True)
class CameraProposal:
    camera_id: str
    zones: tuple[ZoneGuess, ...]
    enabled: bool = True
    notes: tuple[str, ...] = ()  # what was left out (zone names a profile cannot hold), for the comments

    def role_zones(self, role: Role) -> list[str]:
        return [guess.zone for guess in self.zones if guess.role == role]


def _plural_stem(word: str) -> str | None:
    for candidate in (word, word[:-1] if word.endswith("s") else "", word[:-2] if word.endswith("es") else ""):
        if candidate in _VOCABULARY:
            return candidate
    return None


def vocabulary_word(token: str) -> str | None:
    """The vocabulary word a lower-case token is: itself, its singular, or a modifier + the word (`frontdoor`)."""
    exact = _plural_stem(token)
    if exact is not None:
        return exact
    for word in sorted(_VOCABULARY, key=len, reverse=True):
        for form in (word, word + "s", word + "es"):
            if token.endswith(form) and token[: -len(form)] in _PREFIXES:
                return word
    return None


def zone_words(name: str) -> list[str]:
    """A zone name's words, lower case (`FrontDoor_2` -> front, door, 2)."""
    return [part.lower() for part in _SPLIT.split(name) if part]


def classify_zone(name: str) -> ZoneGuess:
    """The role a zone's name suggests (the module docstring's order), with the words that decided."""
    found: dict[str, list[str]] = {}
    for token in zone_words(name):
        word = vocabulary_word(token)
        if word is not None:
            found.setdefault(_VOCABULARY[word], []).append(token)

    def said(kind: str) -> str:
        return ", ".join(found[kind])

    if "not_ours" in found:
        return ZoneGuess(name, "public", f"{said('not_ours')}: not the household's")
    if "entry" in found:
        return ZoneGuess(name, "entry", said("entry"))
    if "private" in found and "public" in found:
        return ZoneGuess(name, None, f"both private ({said('private')}) and public ({said('public')}) words")
    if "private" in found:
        return ZoneGuess(name, "private", said("private"))
    if "public" in found:
        return ZoneGuess(name, "public", said("public"))
    return ZoneGuess(name, None, "no known word")


def frigate_timezone(config: Any) -> str | None:
    """Frigate's `ui.timezone` when it is a known IANA name (the time zone its UI shows), else None."""
    ui = config.get("ui") if isinstance(config, Mapping) else None
    name = ui.get("timezone") if isinstance(ui, Mapping) else None
    if not isinstance(name, str) or not name.strip():
        return None
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return name.strip()


def frigate_camera_zones(config: Any, origin: str = "Frigate config") -> dict[str, list[str]]:
    """Camera name -> its zone names, in the config's order, from a parsed `config.yml` or `/api/config`."""
    if not isinstance(config, Mapping):
        raise FrigateConfigError(f"{origin}: must be a mapping with a `cameras` section, got {show_value(config)}")
    cameras = config.get("cameras")
    if not isinstance(cameras, Mapping) or not cameras:
        raise FrigateConfigError(f"{origin}: no `cameras` section")
    found: dict[str, list[str]] = {}
    for name, camera in cameras.items():
        zones = camera.get("zones") if isinstance(camera, Mapping) else None
        found[str(name)] = [str(zone) for zone in zones] if isinstance(zones, Mapping) else []
    return found


def propose_profiles(config: Any, origin: str = "Frigate config") -> list[CameraProposal]:
    """One proposal per Frigate camera, its zones classified; FrigateConfigError when there are no cameras."""
    cameras = config.get("cameras") if isinstance(config, Mapping) else None
    proposals = []
    for camera_id, zone_names in frigate_camera_zones(config, origin).items():
        body = cameras.get(camera_id) if isinstance(cameras, Mapping) else None
        enabled = not (isinstance(body, Mapping) and body.get("enabled") is False)
        notes = []
        usable = [zone for zone in zone_names if 1 <= len(zone) <= MAX_ZONE_CHARS]
        if len(usable) < len(zone_names):
            notes.append(f"zone names over {MAX_ZONE_CHARS} characters left out")
        if len(usable) > MAX_ZONES:
            notes.append(f"only the first {MAX_ZONES} of {len(usable)} zones kept (a profile's bound)")
            usable = usable[:MAX_ZONES]
        proposals.append(CameraProposal(camera_id, tuple(classify_zone(z) for z in usable), enabled, tuple(notes)))
    return proposals


def _scalar(text: str) -> str:
    """A YAML scalar that reads back as this exact string (`on`, `yes`, `1e3` quoted)."""
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _flow(items: Sequence[str]) -> str:
    return "[" + ", ".join(_scalar(item) for item in items) + "]"


HEADER = """\
# Camera profiles proposed by `hsi frigate profiles` from {origin}. EDIT BEFORE USE.
# The zone roles are guesses from the zone NAMES only (hsi cannot see where Frigate's zones are drawn):
#   entry_zones    ways into the house (door, gate, porch, step, window, garage...)
#   private_zones  the household's own ground (garden, yard, driveway, patio, lawn, path...)
#   other zones    public ground (street, sidewalk, pavement, road...) or names hsi could not place: not watched
# A stranger on an entry or private zone at night, or lingering there in the dark, raises the verdict whatever the
# model says (docs/verdicts.md, the evidence floor); a zone in neither list never does. Check every list, fill in
# the descriptions and the time zone, then set CAMERA_CONTEXT_PATH to this file and run `hsi config check`.
# Everything but the comments is sent to the LLM: keep it short and factual. Every key, with examples:
# hsi_dagster/data/cameras.example.yaml.
"""


def render_profiles(
    proposals: Sequence[CameraProposal], *, origin: str, timezone: str | None, timezone_source: str
) -> str:
    """The camera-profiles file (core/context/camera_profiles.py's format) with the comments that say what to edit."""
    lines = [HEADER.format(origin=origin).rstrip("\n"), "cameras:"]
    skipped = [p.camera_id for p in proposals if not PROFILE_ID.match(p.camera_id)]
    for proposal in proposals:
        if proposal.camera_id in skipped:
            continue
        zones = [guess.zone for guess in proposal.zones]
        entry, private = proposal.role_zones("entry"), proposal.role_zones("private")
        lines.append(f"  {_scalar(proposal.camera_id)}:")
        if not proposal.enabled:
            lines.append("    # disabled in Frigate's config")
        lines.append('    description: ""  # EDIT: what this camera sees, in one sentence')
        if timezone:
            lines.append(f"    timezone: {_scalar(timezone)}  # {timezone_source}")
        else:
            lines.append(
                "    timezone: UTC  # EDIT: your IANA time zone (Europe/London): the night hours are read in it"
            )
        if zones:
            lines.append(f"    zones: {_flow(zones)}  # Frigate's zones of this camera")
        else:
            lines.append(
                "    zones: []  # Frigate has no zones here: no zone rule can fire at this camera; draw the door, "
                "the drive... in Frigate and run `hsi frigate profiles` again"
            )
        lines.append(
            f"    entry_zones: {_flow(entry)}" + (f"  # guessed from: {_why(proposal, 'entry')}" if entry else "")
        )
        lines.append(
            f"    private_zones: {_flow(private)}"
            + (f"  # guessed from: {_why(proposal, 'private')}" if private else "")
        )
        public = [g for g in proposal.zones if g.role == "public"]
        if public:
            lines.append("    # public, not watched: " + "; ".join(_said(g) for g in public))
        unplaced = [g for g in proposal.zones if g.role is None]
        if unplaced:
            lines.append(
                "    # not placed, not watched: "
                + "; ".join(_said(g) for g in unplaced)
                + ": EDIT: add each to entry_zones or private_zones if it is the household's"
            )
        for note in proposal.notes:
            lines.append(f"    # {note}")
        lines.append(f"    entry_point: {'true' if entry else 'false'}  # true: it watches a way into the house")
        lines += [
            "    # approached_from: []  # EDIT: the cameras a visitor passes just before this one",
            "    # notes: [...]; also expected_deliveries, resident_vehicles (plates), pets, working_hours",
        ]
    if lines[-1] == "cameras:":
        lines[-1] = "cameras: {}"
    if skipped:
        lines.append(f"# left out: camera name(s) a profile cannot hold ([A-Za-z0-9_.-], 1-64): {', '.join(skipped)}")
    return "\n".join(lines) + "\n"


def _said(guess: ZoneGuess) -> str:
    return guess.zone if guess.why == guess.zone.lower() else f"{guess.zone} ({guess.why})"


def _why(proposal: CameraProposal, role: Role) -> str:
    return "; ".join(_said(g) for g in proposal.zones if g.role == role)
