"""Who and what Frigate recognised on a tracked object: its sub_label, its attributes and its plate, as facts.

Pure. How Frigate fills these (frigate/track/tracked_object.py, its face and LPR processors, api/event.py):
- `sub_label` is `[name, score]` on MQTT (`sub_label` + `data.sub_label_score` on `/api/events`). Frigate's
  recognisers always give a score: face recognition (a face of its face library), LPR (a plate in its
  `lpr.known_plates`, named), a Frigate+ delivery logo (the best logo attribute, on car/motorcycle/package/person),
  and the classification models (0.17+; bird species). A sub_label set by hand, in Frigate's UI or by an API call
  without `subLabelScore`, has a null score: hsi's own write-back (`risk high`) is one of these.
- `attributes` is `{label: best score}` over the track's life; `current_attributes` the attribute boxes of the
  current frame, `[{label, score, box}]`. Labels: `face`, `license_plate` and the Frigate+ logos.
- `recognized_license_plate` is `[plate, score]` (a string in some versions): any plate LPR read, known or not.

The rule this module implements (docs/frigate.md and the README state it): a sub_label is an IDENTITY only when a
recogniser put it there on a person (a face) or a vehicle (a known plate): it has a score, it is not a delivery logo
and it is not hsi's own text. Everything else is kept as a fact of its kind and never makes anyone "known":
`logo` (a courier's uniform or van: a delivery context), `hsi` (hsi's own write-back read back), `manual` (no
score: set by a person or a script), `classification` (a score on any other label: a bird's species, a custom
model's class). A value of an unexpected shape is ignored with a reason (`ignored`), never an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hsi_dagster.core.frigate.fields import show_value

# hsi's write-back (core/outbound/frigate_writeback.py) sets this prefix + the level; read back, it is never an identity
HSI_SUB_LABEL_PREFIX = "risk "
# Frigate+ logo attributes (frigate's `all_attribute_logos`): a uniform or a van, never an identity
DELIVERY_LOGOS = frozenset(
    {
        "amazon",
        "an_post",
        "canada_post",
        "dhl",
        "dpd",
        "fedex",
        "gls",
        "nzpost",
        "postnl",
        "postnord",
        "purolator",
        "royal_mail",
        "ups",
        "usps",
    }
)
VEHICLE_LABELS = frozenset({"car", "motorcycle", "truck", "bus", "bicycle", "boat", "license_plate"})
FACE, KNOWN_PLATE, LOGO, HSI, MANUAL, CLASSIFICATION = "face", "known_plate", "logo", "hsi", "manual", "classification"
IDENTITY_KINDS = frozenset({FACE, KNOWN_PLATE})
MAX_ATTRIBUTES = 16  # attribute labels kept per payload (Frigate has a handful)
MAX_NAME_CHARS = 64
_NAME = re.compile(r"[^\x00-\x1F\x7F]{1,64}")


@dataclass(frozen=True)
class SubLabel:
    name: str
    score: float | None
    kind: str  # one of FACE, KNOWN_PLATE, LOGO, HSI, MANUAL, CLASSIFICATION

    @property
    def is_identity(self) -> bool:
        return self.kind in IDENTITY_KINDS

    def as_fact(self) -> dict[str, Any]:
        fact: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.score is not None:
            fact["score"] = self.score
        return fact


@dataclass
class Facts:
    """What one payload says about who and what: read leniently, each unreadable part named in `ignored`."""

    sub_label: SubLabel | None = None
    plate: tuple[str, float | None] | None = None
    attributes: dict[str, float] = field(default_factory=dict)  # label -> best score seen
    ignored: list[str] = field(default_factory=list)

    @property
    def logo(self) -> str | None:
        """The courier whose logo was seen (sub_label first, else the best logo attribute)."""
        if self.sub_label is not None and self.sub_label.kind == LOGO:
            return self.sub_label.name.lower()
        logos = {k: v for k, v in self.attributes.items() if k.lower() in DELIVERY_LOGOS}
        return max(logos, key=lambda k: (logos[k], k)).lower() if logos else None


def is_hsi_sub_label(name: str) -> bool:
    return name.strip().lower().startswith(HSI_SUB_LABEL_PREFIX)


def classify_sub_label(label: str, name: str, score: float | None) -> SubLabel:
    """The module docstring's rule: which kind of sub_label this is (only FACE and KNOWN_PLATE are identities)."""
    if is_hsi_sub_label(name):
        kind = HSI
    elif name.strip().lower() in DELIVERY_LOGOS:
        kind = LOGO
    elif score is None:
        kind = MANUAL
    elif label == "person":
        kind = FACE
    elif label in VEHICLE_LABELS:
        kind = KNOWN_PLATE
    else:
        kind = CLASSIFICATION
    return SubLabel(name, score, kind)


def _unit(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and _NAME.fullmatch(value) and value.strip() else None


def read_named(value: Any, name: str, facts: Facts) -> tuple[str, float | None] | None:
    """`[name, score]`, `"name"` or null -> (name, score); any other shape is ignored with a reason."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = _name(value)
        if text is None:
            facts.ignored.append(
                f"{name}: not a name of 1-{MAX_NAME_CHARS} printable characters, got {show_value(value)}"
            )
        return None if text is None else (text, None)
    if isinstance(value, list) and len(value) == 2:
        label, score = value
        if label is None:
            return None  # Frigate clears a sub_label with (None, None)
        text = _name(label)
        if text is None:
            facts.ignored.append(
                f"{name}[0]: not a name of 1-{MAX_NAME_CHARS} printable characters, got {show_value(label)}"
            )
            return None
        if score is None:
            return text, None
        unit = _unit(score)
        if unit is None:
            facts.ignored.append(f"{name}[1]: not a score between 0 and 1, got {show_value(score)}")
            return None
        return text, unit
    facts.ignored.append(f"{name}: must be null, a string or [name, score], got {show_value(value)}")
    return None


def _attribute(facts: Facts, label: Any, score: Any, where: str) -> None:
    text, unit = _name(label), _unit(score)
    if text is None or unit is None:
        facts.ignored.append(f"{where}: not a label and a score between 0 and 1, got {show_value([label, score])}")
        return
    if text not in facts.attributes and len(facts.attributes) >= MAX_ATTRIBUTES:
        facts.ignored.append(f"{where}: more than {MAX_ATTRIBUTES} attribute labels, {text!r} not kept")
        return
    facts.attributes[text] = max(unit, facts.attributes.get(text, 0.0))


def read_attributes(attributes: Any, current: Any, prefix: str, facts: Facts) -> None:
    """`attributes` ({label: score}) and `current_attributes` ([{label, score, box}]) into `facts.attributes`."""
    if isinstance(attributes, dict):
        for label, score in attributes.items():
            _attribute(facts, label, score, f"{prefix}attributes.{str(label)[:MAX_NAME_CHARS]}")
    elif isinstance(attributes, list):  # a list of labels (seen in some docs): present, score unknown
        for index, label in enumerate(attributes):
            _attribute(facts, label, 1.0 if isinstance(label, str) else label, f"{prefix}attributes[{index}]")
    elif attributes is not None:
        facts.ignored.append(f"{prefix}attributes: must be an object of label -> score, got {show_value(attributes)}")
    if isinstance(current, list):
        for index, item in enumerate(current):
            if isinstance(item, dict):
                _attribute(facts, item.get("label"), item.get("score"), f"{prefix}current_attributes[{index}]")
            else:
                facts.ignored.append(f"{prefix}current_attributes[{index}]: must be an object, got {show_value(item)}")
    elif current is not None:
        facts.ignored.append(f"{prefix}current_attributes: must be a list, got {show_value(current)}")


# Frigate's identity fields, by the names it gives them, that each source carries (read_facts reads only those):
# an MQTT event's `after` (scores inside the sub_label and plate pairs) and an API event's `data` (scores apart)
MQTT_IDENTITY_FIELDS = frozenset({"sub_label", "recognized_license_plate", "attributes", "current_attributes"})
API_IDENTITY_FIELDS = frozenset(
    {"sub_label", "recognized_license_plate", "attributes", "sub_label_score", "recognized_license_plate_score"}
)


def read_facts(label: str, payload: Mapping[str, Any], fields: frozenset[str], *, prefix: str) -> Facts:
    """Everything a payload says about identity and attributes (its `fields` of Frigate's identity fields), never
    an exception."""

    def get(name: str) -> Any:
        return payload.get(name) if name in fields else None

    facts = Facts()
    named = read_named(get("sub_label"), f"{prefix}sub_label", facts)
    sub_label_score = get("sub_label_score")
    if named is not None:
        score = named[1]
        if score is None and sub_label_score is not None:
            score = _unit(sub_label_score)
            if score is None:
                facts.ignored.append(
                    f"data.sub_label_score: not a score between 0 and 1, got {show_value(sub_label_score)}"
                )
        facts.sub_label = classify_sub_label(label, named[0], score)
    read_plate = read_named(get("recognized_license_plate"), f"{prefix}recognized_license_plate", facts)
    plate_score = get("recognized_license_plate_score")
    if read_plate is not None:
        plate_text, score = read_plate
        if score is None and plate_score is not None:
            score = _unit(plate_score)
        facts.plate = (plate_text, score)
    read_attributes(get("attributes"), get("current_attributes"), prefix, facts)
    return facts


def identity_enrichment(label: str, facts: Facts) -> dict[str, Any]:
    """The contract's enrichment for the facts: a recognised face or known plate as `reid` (known), a plate as
    `vehicle.plate`, a courier's logo as the uniform or van it is (`clothing` / `vehicle.type`), never an identity."""
    enrichment: dict[str, Any] = {}
    logo = facts.logo
    if logo is not None:
        if label in VEHICLE_LABELS:
            enrichment["vehicle"] = {"type": f"delivery vehicle ({logo})"}
        else:
            enrichment["clothing"] = {"description": f"{logo} delivery uniform or logo"}
    if facts.plate is not None:
        enrichment.setdefault("vehicle", {})["plate"] = facts.plate[0]
    sub_label = facts.sub_label
    if sub_label is not None and sub_label.is_identity:
        enrichment["reid"] = {"identity": sub_label.name, "known": True}
        if sub_label.score is not None:
            enrichment["reid"]["score"] = sub_label.score
    return enrichment


def frigate_facts(facts: Facts) -> dict[str, Any]:
    """The facts as kept in `enrichment.frigate` (stored, read by the context and the floor)."""
    out: dict[str, Any] = {}
    if facts.sub_label is not None:
        out["sub_label"] = facts.sub_label.as_fact()
    if facts.plate is not None:
        out["plate"] = {"text": facts.plate[0], **({"score": facts.plate[1]} if facts.plate[1] is not None else {})}
    if facts.attributes:
        out["attributes"] = dict(sorted(facts.attributes.items()))
    if facts.logo is not None:
        out["delivery"] = facts.logo
    if facts.ignored:
        out["ignored"] = list(facts.ignored)
    return out
