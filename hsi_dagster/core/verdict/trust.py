"""How far the model that answered may raise a verdict above the evidence floor: its trust, measured per model.

Trust t (0-3, the MODEL_TRUST setting) lets the stored score reach the top of the level band t levels above the
evidence floor's level (core/verdict/final.py): 0 = the floor's level decides (the model only places the verdict in
its band), 3 = the model may alert on its own. The floor never lowers anything whatever the trust.

Threat model: free text (captions, Frigate's GenAI descriptions, the model's reading of them) can only RAISE a
verdict, and only within the trust measured for the model that answered: an injected caption that wants an alert
costs at most a false alarm within that measured bound. Nothing in text lowers the floor: an injection that wants
silence is stopped by the structured evidence. Missed intrusions are the expensive error, so the unmeasured default
leans towards the alert (DEFAULT_TRUST below).

`auto` (the default) uses the trust measured for the model's fingerprint (what the answering server reports: model
name and size, plus the output schema and the quality level), stored by `hsi eval` / the `evaluation` asset
(core/evaluation/trust_sweep.py). A record measured for another fingerprint is refused, naming both.
"""

from __future__ import annotations

from dataclasses import dataclass

from hsi_dagster.core.prompt.risk_schema import RISK_LEVELS, level_for_score

SETTING = "MODEL_TRUST"
AUTO = "auto"
TRUST_VALUES: tuple[int, ...] = (0, 1, 2, 3)
# The unmeasured default. A missed intrusion costs far more than a false alarm (docs: the verdict's principles), so
# an unmeasured model may raise a verdict far enough to ALERT on its own: from a silent floor (low) up to high, the
# lowest alerting level. It stops one short of critical: what a model has not earned by measurement cannot take a
# verdict to the top level, and an injected caption costs at most a "high" false alarm until `hsi eval` measures it.
DEFAULT_TRUST = 2
FALSE_ALARM_GOAL = 0.03  # the share of harmless (expected low) holdout scenarios a trust may raise to an alert

MEASURED, CONFIGURED, DEFAULT = "measured", "setting", "default"


class TrustError(ValueError):
    """A trust value out of range, or a measured record for another fingerprint (the message names which)."""


def check_trust(value: object, setting: str = SETTING) -> int:
    """`value` as a trust (a whole number 0-3); TrustError naming `setting` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in TRUST_VALUES:
        raise TrustError(f"{setting}={value!r} is invalid: accepted values are {AUTO} or 0-3")
    return value


@dataclass(frozen=True)
class ModelFingerprint:
    """What trust is measured for: the model as the server reports it (name; size in bytes when reported), the output
    schema and the quality level of the prompt."""

    model: str
    size: int | None
    schema: str
    quality_level: str

    @property
    def key(self) -> str:
        return f"{self.model}|{self.size if self.size is not None else 'size?'}|{self.schema}|{self.quality_level}"


@dataclass(frozen=True)
class TrustRecord:
    """A measurement (storage/trust.py): the recommended trust for one fingerprint. `origin` says where a record
    measured elsewhere comes from (the project's own measurement shipped for the bundled model), empty for a record
    this household's `hsi eval` stored."""

    fingerprint: str
    trust: int
    configuration: str = ""
    origin: str = ""


@dataclass(frozen=True)
class Trust:
    """The trust that applied to one verdict, where it came from (setting, measured, default) and why."""

    value: int
    source: str
    reason: str
    fingerprint: str | None = None

    @property
    def unmeasured(self) -> bool:
        return self.source == DEFAULT


def default_trust(why: str, fingerprint: str | None = None) -> Trust:
    return Trust(DEFAULT_TRUST, DEFAULT, f"{why}: stated default trust {DEFAULT_TRUST}", fingerprint)


def resolve_trust(setting: int | str, fingerprint: ModelFingerprint | None, record: TrustRecord | None) -> Trust:
    """The trust of one answer: MODEL_TRUST when it is a number; with `auto` the record measured for the answering
    model's fingerprint, the stated default when the server did not report its model or nothing was measured.
    A record for another fingerprint raises TrustError naming both (the caller decides what a refusal means)."""
    if setting != AUTO:
        value = check_trust(setting)
        return Trust(value, CONFIGURED, f"{SETTING}={value}", fingerprint.key if fingerprint else None)
    if fingerprint is None:
        return default_trust("the server did not report its model")
    if record is None:
        return default_trust(f"no measured trust for {fingerprint.key}", fingerprint.key)
    if record.fingerprint != fingerprint.key:
        raise TrustError(
            f"measured trust record refused: it is for {record.fingerprint}, the answering model is {fingerprint.key}"
        )
    value = check_trust(record.trust, f"measured trust of {record.fingerprint}")
    origin = f" ({record.origin})" if record.origin else ""
    return Trust(value, MEASURED, f"measured trust {value}{origin}", fingerprint.key)


def refused_trust(error: TrustError, fingerprint: ModelFingerprint) -> Trust:
    """The default trust after a refused record: the refusal is the reason, so it is shown, never silent."""
    return default_trust(str(error), fingerprint.key)


def trust_for_answer(
    setting: int | str, fingerprint: ModelFingerprint | None, record: TrustRecord | None, *, unreported: str
) -> Trust:
    """The trust production applies to one answer, never an exception: `resolve_trust`, with `unreported` the reason
    when the server did not report its model, and a refused record turned into the default with the refusal as the
    reason. The pipeline's asset and the evaluation pass both call this, so `hsi eval` applies production's trust."""
    if fingerprint is None and setting == AUTO:
        return default_trust(unreported)
    try:
        return resolve_trust(setting, fingerprint, record)
    except TrustError as exc:
        assert fingerprint is not None  # only a measured record for a reported model can be refused
        return refused_trust(exc, fingerprint)


def level_index(level: str) -> int:
    return RISK_LEVELS.index(level)


def model_level(model_score: int | None) -> str | None:
    """The level of the model's own verdict score (its rubric score in the rubric schema); None without one."""
    return level_for_score(model_score) if model_score is not None else None


def untrusted_note(model_level_: str | None, stored_level: str | None, trust_reason: str | None) -> str | None:
    """ "model said critical; not trusted for this model: measured trust 0" when the model's own level is above the
    stored one (None otherwise): what a phone, Home Assistant, the UI and `hsi report` show beside the verdict."""
    if model_level_ not in RISK_LEVELS or stored_level not in RISK_LEVELS:
        return None
    if level_index(model_level_) <= level_index(stored_level):
        return None
    return f"model said {model_level_}; not trusted for this model: {trust_reason or 'trust unknown'}"
