"""The evaluation engine: the labeled scenarios through production's enrichment, budget, risk and verdict code.

Each scenario goes the production way, through the very steps the assets call (hsi_dagster/steps.py): the context
for the batch at the pass's quality level with the example camera profiles the labels were written against
(`scenario_profiles`), stored and read back as JSON, the evidence floor with the settings' rules and, when the pass
uses history and the scenario has it, the history facts core/context/history.py computes from the scenario's inputs,
the budget from the server's live per-slot context, the prompt for the pass's output schema, the call-and-repair
loop and the stored verdict.

A `.visits` pass (EvalConfiguration.visits) then links the prepared batches into visits per situation, in time
order, and raises each floor by its visit (evaluation/visit_floors.py) before any model call: the floor is the only
thing visits change.

One LLM call (plus its one repair) per scenario gives three results (evaluation/configurations.py): the model alone,
the model raised to the floor, and the floor alone. Results, figures and Cohen's kappa against every other stored
configuration go to DuckDB (storage/evaluation.py). The `evaluation` asset and `hsi eval` both call
`evaluate_and_store`.

Model trust (evaluation/trust.py): the with-floor configuration is stored with the trust production would apply to the
pass's model; after the pass the trust sweep over every trust 0-3 is stored for the model's fingerprint.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import dagster as dg

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.evaluation.metrics import ConfigurationFigures, ScenarioResult, pairwise_kappa, summarise
from hsi_dagster.core.prompt.messages import static_prompt
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.core.verdict.trust import ModelFingerprint, Trust
from hsi_dagster.evaluation.configurations import EvalConfiguration, set_of
from hsi_dagster.evaluation.scenario_run import Assess, PreparedScenario, floor_result, prepare_scenario, run_prepared
from hsi_dagster.evaluation.trust import TrustMeasurement, applied_trust, measure_trust, pass_fingerprint
from hsi_dagster.evaluation.visit_floors import floors_with_visits
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import assess_batch, budget_for
from hsi_dagster.storage.evaluation import (
    finish_run,
    load_results,
    save_configuration,
    save_result,
    stored_configurations,
)
from hsi_dagster.synthetic.scenarios import Scenario, scenario_profiles


# ----------------------------------------------------------------------------------------------- a pass
@dataclass
class PassRun:
    results: dict[str, list[ScenarioResult]]  # stored configuration name -> its results, in scenario order
    model: str
    slot_context: int = 0
    budget: int = 0
    budget_source: str = "none (floor only)"
    seconds: float = 0.0
    llm_results: list[ScenarioResult] = field(default_factory=list)


def _assess_with(llm: LlamaServerResource, max_tokens: int, schema: str) -> Assess:
    """Production's call-and-repair loop with llama-server's schema-constrained chat as the call."""
    return lambda messages: assess_batch(messages, llm.chat_json, max_tokens=max_tokens, schema=schema)


def _with_visits(
    configuration: EvalConfiguration, prepared: list[PreparedScenario], settings: HsiSettings
) -> list[PreparedScenario]:
    """A `.visits` pass: each batch's floor raised by its visit (evaluation/visit_floors.py), as the pipeline does."""
    return floors_with_visits(prepared, settings) if configuration.visits else prepared


def evaluate_floor_only(
    configuration: EvalConfiguration,
    scenarios: Sequence[Scenario],
    settings: HsiSettings,
    profiles: Mapping[str, CameraProfile] | None = None,
) -> PassRun:
    """The evidence floor on every scenario: no server, milliseconds. `profiles` None: the example camera profiles
    the project's set was labeled against; the Frigate-shaped set passes {} (a new Frigate user has none)."""
    started = time.perf_counter()
    profiles = scenario_profiles() if profiles is None else profiles
    prepared = [
        prepare_scenario(s, configuration=configuration, profiles=profiles, settings=settings, estimate_budget=None)
        for s in scenarios
    ]
    results = [floor_result(item, configuration.floor_name) for item in _with_visits(configuration, prepared, settings)]
    return PassRun({configuration.floor_name: results}, "evidence floor", seconds=time.perf_counter() - started)


def evaluate_configuration(
    configuration: EvalConfiguration,
    scenarios: Sequence[Scenario],
    llm: LlamaServerResource | None,
    settings: HsiSettings,
    *,
    on_result: Callable[[ScenarioResult], None] | None = None,
    concurrency: int | None = None,
    counter: TokenCounter | None = None,
    deadline: float | None = None,
    trust: Trust | int = 0,
    profiles: Mapping[str, CameraProfile] | None = None,
) -> PassRun:
    """Every scenario under one pass; at most `concurrency` (default: the server's slots) calls at once; the
    with-floor verdicts within `trust` (evaluate_and_store passes the one production would apply).
    With `deadline` (time.monotonic()), scenarios not started by then are left out of the run (a bench's bound)."""
    if not configuration.llm or llm is None:
        run = evaluate_floor_only(configuration, scenarios, settings, profiles)
        for result in run.results[configuration.floor_name]:
            if on_result is not None:
                on_result(result)
        return run
    started = time.perf_counter()
    info = llm.ensure_ready()
    choice = budget_for(settings, llm.live_slot_context())
    profiles = scenario_profiles() if profiles is None else profiles
    prepared = [
        prepare_scenario(
            scenario,
            configuration=configuration,
            profiles=profiles,
            settings=settings,
            estimate_budget=choice.estimate_budget,
            counter=counter,
        )
        for scenario in scenarios
    ]
    prepared = _with_visits(configuration, prepared, settings)
    assess_call = _assess_with(llm, settings.NEMOTRON_MAX_OUTPUT_TOKENS, configuration.schema)
    workers = max(1, concurrency or min(info.total_slots, settings.PARALLEL))
    results: dict[str, list[ScenarioResult]] = {name: [] for name in configuration.stored_names()}

    def run_one(item: PreparedScenario) -> list[ScenarioResult] | None:
        if deadline is not None and time.monotonic() > deadline:
            return None
        return run_prepared(item, configuration, assess_call, trust=trust)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eval") as pool:
        for triple in pool.map(run_one, prepared):
            if triple is None:
                continue
            for result in triple:
                results[result.configuration].append(result)
                if on_result is not None:
                    on_result(result)
    return PassRun(
        results=results,
        model=info.model,
        slot_context=choice.slot_context,
        budget=choice.budget,
        budget_source=choice.source,
        seconds=time.perf_counter() - started,
    )


def _llm_for(configuration: EvalConfiguration, llm: LlamaServerResource) -> LlamaServerResource:
    """The pipeline's server(s), or a resource for the configuration's endpoint with the same client settings (and
    API key: the endpoints compared are the user's own servers)."""
    if configuration.endpoint is None:
        return llm
    fields = {name: getattr(llm, name) for name in type(llm).model_fields}
    return type(llm)(**{**fields, "urls": [configuration.endpoint]})


DESCRIPTIONS = {
    "model": "the model's own verdict score (no evidence floor)",
    "with-floor": "max(model score, evidence floor): what production stores",
    "floor": "the evidence floor alone (core/verdict/evidence.py), no model",
}


@dataclass
class StoredRun:
    run: PassRun
    figures: dict[str, ConfigurationFigures]  # per stored configuration of the pass
    compared: list[str]  # every configuration of the same labeled set with stored figures, these included
    endpoint: str
    trust: TrustMeasurement | None = None  # None: a floor-only pass


def _prompt_sha256(schema: str) -> str:
    return hashlib.sha256("".join(static_prompt(schema)).encode()).hexdigest()


def _description(configuration: EvalConfiguration, name: str) -> str:
    kind = "floor" if name == configuration.floor_name else "with-floor" if name.endswith(".with-floor") else "model"
    extra = [configuration.description] if configuration.description else []
    if kind != "floor" and configuration.schema != "plain":
        extra.append(f"{configuration.schema} output schema")
    if configuration.history:
        extra.append("history facts from the scenarios")
    if configuration.visits:
        extra.append("batches linked into visits, each floor raised by its visit")
    if configuration.inputs != "enriched":
        extra.append(f"{configuration.inputs}-like inputs (core/evaluation/frigate_inputs.py)")
    return "; ".join([DESCRIPTIONS[kind], *extra])


def evaluate_and_store(
    configuration: EvalConfiguration,
    scenarios: Sequence[Scenario],
    llm: LlamaServerResource | None,
    settings: HsiSettings,
    duckdb: HsiDuckDBResource,
    *,
    on_result: Callable[[ScenarioResult], None] | None = None,
    concurrency: int | None = None,
    deadline: float | None = None,
    profiles: Mapping[str, CameraProfile] | None = None,
    combine: Callable[[str, list[ScenarioResult]], list[ScenarioResult]] | None = None,
) -> StoredRun:
    """Run one pass, store each result as it comes (short connections: none is held across an LLM call), then the
    figures of each configuration it yields and their kappa against every other stored configuration.
    `combine` (the Frigate-shaped set: batches -> one result per labeled scene) turns each configuration's results
    into the ones stored and measured, after the pass; the trust sweep is then not stored (it is the project's set's
    measurement, with its inputs as written: a pass on Frigate-like inputs stores none either)."""
    target = _llm_for(configuration, llm) if llm is not None and configuration.llm else None
    endpoint = "none" if target is None else configuration.endpoint or ",".join(target.urls)
    fingerprint: ModelFingerprint | None = None

    def store(result: ScenarioResult) -> None:
        if combine is None:
            with duckdb.get_connection() as conn:
                save_result(conn, result)
        if on_result is not None:
            on_result(result)

    try:
        if target is not None:
            target.ensure_ready()  # the model is reported once the server is up
            fingerprint = pass_fingerprint(configuration, target)
        applied = applied_trust(fingerprint, settings, duckdb, endpoint)
        run = evaluate_configuration(
            configuration,
            scenarios,
            target,
            settings,
            on_result=store,
            concurrency=concurrency,
            deadline=deadline,
            trust=applied,
            profiles=profiles,
        )
    finally:
        if target is not None and target is not llm:
            target.teardown_after_execution(dg.build_init_resource_context())
    if combine is not None:
        run.results = {name: combine(name, results) for name, results in run.results.items()}
    figures: dict[str, ConfigurationFigures] = {}
    same_set = set_of(configuration.floor_name)  # agreement and the report stay within one labeled set
    with duckdb.get_connection() as conn:
        for name, results in run.results.items():
            if combine is not None:
                for result in results:
                    save_result(conn, result)
            figures[name] = summarise(name, results)
            others = [c for c in stored_configurations(conn) if c != name and set_of(c) == same_set]
            agreement = [(other, *pairwise_kappa(results, load_results(conn, other))) for other in others]
            is_floor = name == configuration.floor_name
            save_configuration(
                conn,
                name,
                endpoint=None if is_floor else endpoint,
                model="evidence floor" if is_floor else run.model,
                quality_level=configuration.quality_level,
                prompt_sha256=None if is_floor else _prompt_sha256(configuration.schema),
                description=_description(configuration, name),
            )
            finish_run(conn, figures[name], [r.scenario_id for r in results], agreement)
        compared = [c for c in stored_configurations(conn) if set_of(c) == same_set]
    measurement = None
    if target is not None and combine is None and configuration.inputs == "enriched":
        with_floor = run.results.get(configuration.with_floor_name, [])
        measurement = measure_trust(with_floor, fingerprint, applied, duckdb, configuration.name)
    return StoredRun(run, figures, compared, endpoint, measurement)
