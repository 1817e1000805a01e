"""Model trust in an evaluation pass (core/verdict/trust.py, core/evaluation/trust_sweep.py): which model the pass
measured, the trust its with-floor verdicts are stored with, and the sweep whose recommendation production reads.

- `pass_fingerprint`: what the pass's server(s) report (GET /v1/models: name and size) with the pass's schema and
  quality level; None when a server reports no model or they report different ones (a measurement is one model's).
- `applied_trust`: the trust production would apply to that model now (MODEL_TRUST, or with `auto` the stored record),
  resolved as assets/assessments.py does.
- `measure_trust`: every trust 0-3 recomputed from the with-floor results' model and floor scores (no more calls) on
  the holdout split; the recommended trust (false alarms within the goal) stored for the fingerprint (storage/trust.py).
- `measure_household_trust`: the same sweep over the household's corrected batches (`hsi eval --household`), stored as
  the household's own measurement once there are enough of them; production then reads it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hsi_dagster.core.evaluation.metrics import ScenarioResult
from hsi_dagster.core.evaluation.trust_sweep import (
    TrustPoint,
    TrustSample,
    household_shortfall,
    recommended_trust,
    trust_sweep,
)
from hsi_dagster.core.verdict.trust import AUTO, FALSE_ALARM_GOAL, ModelFingerprint, Trust, trust_for_answer
from hsi_dagster.evaluation.configurations import EvalConfiguration
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.trust import save_household_trust, save_trust, trust_record_for


@dataclass(frozen=True)
class TrustMeasurement:
    """The trust sweep of one LLM pass: what each trust 0-3 would have stored on the holdout split, the recommended
    trust, whether it was stored for the model's fingerprint (and why not), and the trust the with-floor results
    were stored with."""

    applied: Trust
    fingerprint: str | None
    holdout: list[TrustPoint]
    recommended: int | None
    stored: bool
    note: str


def pass_fingerprint(configuration: EvalConfiguration, target: LlamaServerResource) -> ModelFingerprint | None:
    """The fingerprint of the model the pass's server(s) report; None when one does not report it, or they report
    different models (a measurement must belong to one model)."""
    identities = {target.model_identity(url) for url in target.urls}
    if len(identities) != 1 or None in identities:
        return None
    (identity,) = identities
    assert identity is not None
    return ModelFingerprint(
        short_model_name(identity.name), identity.size, configuration.schema, configuration.quality_level
    )


def applied_trust(
    fingerprint: ModelFingerprint | None, settings: HsiSettings, duckdb: HsiDuckDBResource, endpoint: str
) -> Trust:
    """The trust production would apply to this model now (as assets/assessments.py resolves it)."""
    record = None
    if fingerprint is not None and settings.MODEL_TRUST == AUTO:
        with duckdb.get_connection() as conn:
            record = trust_record_for(conn, fingerprint)
    unreported = f"the server(s) at {endpoint} did not report one model"
    return trust_for_answer(settings.MODEL_TRUST, fingerprint, record, unreported=unreported)


def measure_trust(
    results: Sequence[ScenarioResult],
    fingerprint: ModelFingerprint | None,
    applied: Trust,
    duckdb: HsiDuckDBResource,
    configuration: str,
    goal: float = FALSE_ALARM_GOAL,
) -> TrustMeasurement:
    """The sweep over the with-floor results of the holdout split and, when it measures a false-alarm rate and the
    model reported itself, the recommended trust stored for its fingerprint."""
    samples = [
        TrustSample(r.scenario_id, r.expected_level, r.model_score, r.floor_score or 0)
        for r in results
        if r.split == "holdout"
    ]
    points = trust_sweep(samples)
    recommended = recommended_trust(points, goal)
    key = fingerprint.key if fingerprint is not None else None
    if fingerprint is None:
        note = "not stored: the server did not report one model"
    elif recommended is None:
        note = "not stored: no harmless holdout scenario in this run (run the holdout split)"
    else:
        with duckdb.get_connection() as conn:
            save_trust(conn, fingerprint, recommended, points, goal=goal, split="holdout", configuration=configuration)
        note = f"stored: trust {recommended} for {key}"
    return TrustMeasurement(applied, key, points, recommended, note.startswith("stored"), note)


def measure_household_trust(
    results: Sequence[ScenarioResult],
    fingerprint: ModelFingerprint | None,
    applied: Trust,
    duckdb: HsiDuckDBResource,
    goal: float = FALSE_ALARM_GOAL,
) -> TrustMeasurement:
    """The sweep over the with-floor results of the household's corrected batches and, when they are enough
    (`household_shortfall`) and the model reported itself, the recommended trust stored as the household's."""
    samples = [TrustSample(r.scenario_id, r.expected_level, r.model_score, r.floor_score or 0) for r in results]
    points = trust_sweep(samples)
    recommended = recommended_trust(points, goal)
    shortfall = household_shortfall(samples)
    key = fingerprint.key if fingerprint is not None else None
    if fingerprint is None:
        note = "not stored: the server did not report one model"
    elif shortfall is not None or recommended is None:  # enough batches always include harmless ones
        note = f"not stored (the labeled set's measurement stands): {shortfall or 'no harmless batch'}"
    else:
        with duckdb.get_connection() as conn:
            save_household_trust(conn, fingerprint, recommended, points, batches=len(samples), goal=goal)
        note = f"stored: trust {recommended} for {key}, measured on {len(samples)} corrected batches"
    return TrustMeasurement(applied, key, points, recommended, note.startswith("stored"), note)
