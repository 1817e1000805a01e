"""`evaluation`: the labeled scenarios through production's code, one static partition per LLM pass.

A thin face over hsi_dagster/evaluation/: each partition is one pass (an endpoint, a quality level, an output
schema; the model is whatever that endpoint serves) and stores the three configurations it yields (the model
alone, the model raised to the evidence floor, the floor alone). The markdown report with a confusion matrix per
configuration and a comparison chart is the asset's metadata, with the trust sweep of the pass (every trust 0-3 on the
holdout split, the recommended trust stored for the model). `hsi eval` runs the same engine.

The `household` partition is `hsi eval --household`: the household's corrected batches replayed from their stored
contexts through the household configuration (evaluation/household.py), its figures beside those of the stored
verdicts and how many replayed floors equal the stored ones, as the materialization's metadata (like the CLI, it
writes nothing to the evaluation tables: the labeled set's comparisons and trust stay its own).
"""

from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from hsi_dagster.core.evaluation.metrics import ScenarioResult
from hsi_dagster.evaluation.configurations import EvalConfiguration, default_configurations
from hsi_dagster.evaluation.engine import evaluate_and_store
from hsi_dagster.evaluation.household import HouseholdRun, load_cases, replay
from hsi_dagster.evaluation.report import report_for
from hsi_dagster.partitions import LLAMA_SLOTS_POOL
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource, PipelineSettingsResource
from hsi_dagster.synthetic.scenarios import SCENARIOS_PATH, load_scenarios, select_scenarios

HOUSEHOLD = "household"  # the partition that replays the household's corrected batches


def _metadata_value(value: float | int | None, digits: int = 4) -> float | int | str:
    if value is None:
        return "n/a"
    return round(value, digits) if isinstance(value, float) else value


def evaluation_asset(
    configurations: Sequence[EvalConfiguration],
    *,
    scenarios_path: str | Path = SCENARIOS_PATH,
    limit: int | None = None,
    scenario_ids: Sequence[str] | None = None,
    split: str | None = None,
    name: str = "evaluation",
    household: EvalConfiguration | None = None,
) -> dg.AssetsDefinition:
    """The `evaluation` asset over these passes (static partitions, one per pass, and HOUSEHOLD: the household's
    corrected batches through `household`, by default the first pass); `limit`, `scenario_ids` and `split` run a
    subset of the labeled scenarios (tests, quick checks, the holdout split)."""
    by_name = {c.name: c for c in configurations}
    if len(by_name) != len(configurations):
        raise ValueError("evaluation configurations need unique names")
    if HOUSEHOLD in by_name:
        raise ValueError(f"{HOUSEHOLD!r} is the household partition's key: name the configuration otherwise")
    household_configuration = household or configurations[0]
    scenarios_path = Path(scenarios_path)

    @dg.asset(
        name=name,
        partitions_def=dg.StaticPartitionsDefinition([*by_name, HOUSEHOLD]),
        group_name="evaluation",
        kinds={"duckdb"},
        pool=LLAMA_SLOTS_POOL,  # shares the llama-server slots with the pipeline's assessments
        description="Labeled scenarios through production's enrichment, floor, budget and risk code, per pass",
    )
    def _evaluation(
        context: dg.AssetExecutionContext,
        duckdb: HsiDuckDBResource,
        llm: LlamaServerResource,
        pipeline_settings: PipelineSettingsResource,
    ) -> dg.MaterializeResult:
        settings = pipeline_settings.get()
        if context.partition_key == HOUSEHOLD:
            return household_replay(context, household_configuration, duckdb, llm, pipeline_settings)
        configuration = by_name[context.partition_key]
        scenarios = select_scenarios(load_scenarios(scenarios_path), limit, scenario_ids, split)

        def log(result: ScenarioResult) -> None:
            context.log.info(
                f"{result.configuration} {result.scenario_id} {result.category}: expected {result.expected_level}, "
                f"got {result.predicted or result.status} ({result.risk_score}) in {result.latency_ms / 1000:.1f} s"
            )

        stored = evaluate_and_store(configuration, scenarios, llm, settings, duckdb, on_result=log)
        run = stored.run
        source = f"{scenarios_path.name} ({len(scenarios)} scenarios)"
        report = report_for(duckdb, stored.compared, source)
        metadata: dict[str, object] = {
            "model": run.model,
            "endpoint": stored.endpoint,
            "quality_level": configuration.quality_level,
            "schema": configuration.schema,
            "scenarios": len(scenarios),
            "context_budget": run.budget,
            "budget_source": run.budget_source,
            "run_seconds": round(run.seconds, 1),
        }
        for stored_name, figures in stored.figures.items():
            metadata[f"{stored_name}: level_accuracy"] = _metadata_value(figures.level_accuracy)
            metadata[f"{stored_name}: under_call_rate"] = _metadata_value(figures.under_call_rate)
            metadata[f"{stored_name}: false_alarm_rate"] = _metadata_value(figures.false_alarm_rate)
            metadata[f"{stored_name}: schema_valid_rate"] = _metadata_value(figures.schema_valid_rate)
            metadata[f"{stored_name}: adversarial_handled"] = (
                f"{figures.adversarial_correct} of {figures.adversarial_scenarios}"
            )
            metadata[f"{stored_name}: latency_p50_ms"] = _metadata_value(figures.latency_p50_ms)
            metadata[f"{stored_name}: latency_p95_ms"] = _metadata_value(figures.latency_p95_ms)
        if stored.trust is not None:
            measurement = stored.trust
            metadata["trust_applied"] = f"{measurement.applied.value} ({measurement.applied.reason})"
            metadata["trust_recommended"] = "none" if measurement.recommended is None else measurement.recommended
            metadata["trust_stored"] = measurement.note
            if measurement.applied.unmeasured:
                metadata["trust_warning"] = f"unmeasured trust: {measurement.applied.reason}"
            rows = "\n".join(
                f"| {p.trust} | {_metadata_value(p.recall)} | {_metadata_value(p.false_alarm_rate)} | "
                f"{_metadata_value(p.raise_precision)} | {p.raised} | {_metadata_value(p.level_accuracy)} |"
                for p in measurement.holdout
            )
            metadata["trust_sweep"] = dg.MetadataValue.md(
                "| trust | recall (high+critical) | false alarms | raise precision | raised | level accuracy |\n"
                "|---|---|---|---|---|---|\n" + rows
            )
        metadata["report"] = dg.MetadataValue.md(report)
        return dg.MaterializeResult(metadata=metadata)  # type: ignore[arg-type]

    return _evaluation


def household_replay(
    context: dg.AssetExecutionContext,
    configuration: EvalConfiguration,
    duckdb: HsiDuckDBResource,
    llm: LlamaServerResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """The HOUSEHOLD partition: `hsi eval --household` through `configuration`, its figures as metadata."""
    cases, skipped = load_cases(duckdb)
    for line in skipped:
        context.log.warning(f"household: skipped {line}")
    metadata: dict[str, object] = {
        "configuration": configuration.name,
        "corrected_batches": len(cases),
        "cameras": ", ".join(sorted({case.camera_id for case in cases})) or "none",
        "skipped": len(skipped),
    }
    if not cases:
        context.log.info("household: no corrected batch with a stored context and verdict (`hsi correct`)")
        return dg.MaterializeResult(metadata=metadata)  # type: ignore[arg-type]
    settings = pipeline_settings.get()
    run = replay(
        cases,
        configuration,
        llm if configuration.llm else None,
        settings,
        duckdb,
        pipeline_settings.camera_profiles(),
    )
    metadata.update(household_metadata(run))
    return dg.MaterializeResult(metadata=metadata)  # type: ignore[arg-type]


def household_metadata(run: HouseholdRun) -> dict[str, object]:
    """The replay's figures and those of the stored verdicts (`household.stored`, `household.stored-floor`), and on
    how many batches the replayed floor is the stored one (all of them with an unchanged configuration); with a
    server, the trust that applied and whether the corrected batches measured one (evaluation/trust.py)."""
    metadata: dict[str, object] = {"model": run.model, "replayed_floor_equals_stored": run.faithful}
    for figures_name, figures in run.figures.items():
        metadata[f"{figures_name}: level_accuracy"] = _metadata_value(figures.level_accuracy)
        metadata[f"{figures_name}: under_call_rate"] = _metadata_value(figures.under_call_rate)
        metadata[f"{figures_name}: false_alarm_rate"] = _metadata_value(figures.false_alarm_rate)
        metadata[f"{figures_name}: schema_valid_rate"] = _metadata_value(figures.schema_valid_rate)
    metadata["differs"] = dg.MetadataValue.md("\n".join(f"- {line}" for line in run.differs) or "none")
    if run.trust is not None:  # with a server: the trust that applied and the household's own measurement
        metadata["trust_applied"] = f"{run.trust.applied.value} ({run.trust.applied.reason})"
        metadata["household_trust"] = run.trust.note
    return metadata


evaluation = evaluation_asset(default_configurations())
