"""The household's own evaluation set (`hsi eval --household`): every corrected batch replayed from its stored context
through the current configuration, the household's latest correction as the label.

Real data, real labels. Each batch goes the production way: its floor by `stored_floor.batch_floor` (what the
`risk_assessments` asset calls: the current EVIDENCE_* rules and camera profiles, the household exceptions in force
when the stored verdict was judged, the fast-path track, the evidence-only alerts), and with a server the prompt of
its stored context at the live budget, the call-and-repair loop and the stored verdict within the trust production
would apply. The exceptions are those of the verdict's own assessment time, so a batch's own correction (received
after) never exempts its replay, and an unchanged configuration gives back the stored floor: `faithful` counts it.

The figures are the labeled set's (core/evaluation/metrics.py `summarise`), beside the same figures of the verdicts
as stored; nothing is written to the evaluation tables (the labeled set's comparisons stay its own). With a server,
the trust sweep over the corrected batches is stored as the household's own measurement once there are enough of them
(evaluation/trust.py `measure_household_trust`); production then reads it before the labeled set's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import ValidationError

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.evaluation.metrics import ConfigurationFigures, ScenarioResult, summarise
from hsi_dagster.core.prompt.budget import PromptTooLarge
from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS, level_for_score
from hsi_dagster.evaluation.configurations import EvalConfiguration
from hsi_dagster.evaluation.engine import _assess_with, _llm_for
from hsi_dagster.evaluation.scenario_run import PreparedScenario, floor_result, run_prepared
from hsi_dagster.evaluation.stored_floor import batch_floor
from hsi_dagster.evaluation.trust import TrustMeasurement, applied_trust, measure_household_trust, pass_fingerprint
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import budget_for, prompt_for
from hsi_dagster.storage.corrections import household_labels
from hsi_dagster.synthetic.scenarios import Scenario

SPLIT = "household"
STORED = "household.stored"  # the verdicts as stored, against the same labels
STORED_FLOOR = "household.stored-floor"  # the stored verdicts' floor alone
_BANDS = {level: (low, high) for level, low, high in LEVEL_BANDS}


@dataclass(frozen=True)
class HouseholdCase:
    batch_id: str
    camera_id: str
    label: str  # the household's latest correction
    context: EnrichedContext
    assessed_at: datetime  # when the stored verdict was judged
    stored_level: str | None
    stored_status: str
    stored_floor_score: int | None

    def scenario(self) -> Scenario:
        """The case as a labeled scenario (category: the camera, so figures can be read per camera)."""
        return Scenario(
            scenario_id=self.batch_id,
            category=self.camera_id,
            expected_level=self.label,
            score_band=_BANDS[self.label],
            reason="the household's correction",
            adversarial=False,
            camera_id=self.camera_id,
            batch={"batch_id": self.batch_id, "camera_id": self.camera_id},
            detections=[],
            split=SPLIT,
        )


def load_cases(duckdb: HsiDuckDBResource) -> tuple[list[HouseholdCase], list[str]]:
    """The corrected batches with a stored context and verdict; one line per batch left out and why."""
    cases, skipped = [], []
    with duckdb.get_connection(read_only=True) as conn:
        rows = household_labels(conn)
    for row in rows:
        try:
            context = EnrichedContext.from_json(row["context"])
        except ValidationError as exc:
            skipped.append(f"{row['batch_id']}: stored context unreadable ({exc.error_count()} errors)")
            continue
        cases.append(
            HouseholdCase(
                row["batch_id"],
                row["camera_id"],
                row["label"],
                context,
                row["assessed_at"],
                row["risk_level"],
                row["status"],
                row["floor_score"],
            )
        )
    return cases, skipped


def stored_results(cases: Sequence[HouseholdCase]) -> dict[str, list[ScenarioResult]]:
    """The stored verdicts and their floors as results against the household's labels."""
    verdicts, floors = [], []
    for case in cases:
        scenario = case.scenario()
        base = ScenarioResult(
            configuration=STORED,
            scenario_id=case.batch_id,
            category=case.camera_id,
            expected_level=case.label,
            band_low=scenario.score_band[0],
            band_high=scenario.score_band[1],
            adversarial=False,
            status=case.stored_status,
            risk_level=case.stored_level,
            split=SPLIT,
            floor_score=case.stored_floor_score,
        )
        verdicts.append(base)
        floor = case.stored_floor_score or 0
        floors.append(
            replace(base, configuration=STORED_FLOOR, status="ok", risk_score=floor, risk_level=level_for_score(floor))
        )
    return {STORED: verdicts, STORED_FLOOR: floors}


def _prepare(
    case: HouseholdCase,
    configuration: EvalConfiguration,
    settings: HsiSettings,
    profiles: dict[str, CameraProfile],
    duckdb: HsiDuckDBResource,
    estimate_budget: int | None,
) -> PreparedScenario:
    started = time.perf_counter()
    with duckdb.get_connection(read_only=True) as conn:
        floor, _ = batch_floor(conn, case.batch_id, case.camera_id, settings, profiles, now=case.assessed_at)
    floor_ms = (time.perf_counter() - started) * 1000
    scenario = case.scenario()
    if estimate_budget is None:
        return PreparedScenario(scenario, None, (), floor, floor_ms)
    try:
        fitted = prompt_for(case.context, estimate_budget, configuration.schema, batch_id=case.batch_id)
    except PromptTooLarge as exc:
        return PreparedScenario(scenario, None, (), floor, floor_ms, error=str(exc))
    return PreparedScenario(scenario, fitted.messages, tuple(fitted.sections_removed), floor, floor_ms)


@dataclass
class HouseholdRun:
    results: dict[str, list[ScenarioResult]]  # household.floor, and with a server household.model, .with-floor
    figures: dict[str, ConfigurationFigures]  # of those and of the stored verdicts (STORED, STORED_FLOOR)
    faithful: int  # batches whose replayed floor is the stored floor
    differs: list[str]  # the others: "batch: stored floor 45, replayed 0"
    model: str
    trust: TrustMeasurement | None = None  # with a server: the sweep over the corrected batches, stored when enough


def replay(
    cases: Sequence[HouseholdCase],
    configuration: EvalConfiguration,
    llm: LlamaServerResource | None,
    settings: HsiSettings,
    duckdb: HsiDuckDBResource,
    profiles: dict[str, CameraProfile],
) -> HouseholdRun:
    """Every case through `configuration` (its schema and server; the quality level is the stored context's)."""
    names = {configuration.floor_name: "household.floor"}
    target = _llm_for(configuration, llm) if llm is not None and configuration.llm else None
    results: dict[str, list[ScenarioResult]] = {"household.floor": []}
    model = "evidence floor"
    if target is None:
        prepared = [_prepare(case, configuration, settings, profiles, duckdb, None) for case in cases]
        results["household.floor"] = [floor_result(p, "household.floor") for p in prepared]
    else:
        info = target.ensure_ready()
        model = info.model
        endpoint = configuration.endpoint or ",".join(target.urls)
        fingerprint = pass_fingerprint(configuration, target)
        trust = applied_trust(fingerprint, settings, duckdb, endpoint)
        budget = budget_for(settings, target.live_slot_context()).estimate_budget
        assess_call = _assess_with(target, settings.NEMOTRON_MAX_OUTPUT_TOKENS, configuration.schema)
        names |= {configuration.model_name: "household.model", configuration.with_floor_name: "household.with-floor"}
        results |= {"household.model": [], "household.with-floor": []}
        for case in cases:
            prepared_case = _prepare(case, configuration, settings, profiles, duckdb, budget)
            for result in run_prepared(prepared_case, configuration, assess_call, trust=trust):
                name = names[result.configuration]
                results[name].append(replace(result, configuration=name))
    differs = []
    for case, result in zip(cases, results["household.floor"], strict=True):
        if (case.stored_floor_score or 0) != result.floor_score:
            differs.append(f"{case.batch_id}: stored floor {case.stored_floor_score}, replayed {result.floor_score}")
    measured = None
    if target is not None:
        measured = measure_household_trust(results["household.with-floor"], fingerprint, trust, duckdb)
    all_results = {**results, **stored_results(cases)}
    figures = {name: summarise(name, items) for name, items in all_results.items()}
    return HouseholdRun(results, figures, len(cases) - len(differs), differs, model, measured)
