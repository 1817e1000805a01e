"""What an evaluation compares: LLM passes, and the configurations each pass yields.

One LLM pass (an endpoint, a quality level, an output schema, with or without history) runs the model once per
scenario and yields THREE stored configurations, because the floor is code:
- `<pass>`            the model only (its own verdict score, as before the evidence floor existed);
- `<pass>.with-floor` the model raised to the evidence floor: what production stores (core/verdict/final.py);
- `floor.<level>[.history]` the evidence floor alone (no model; identical for every pass at that level).
A floor-only pass (`llm=False`) needs no server at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hsi_dagster.core.context.enrichment import QUALITY_LEVEL_TYPES
from hsi_dagster.core.evaluation.frigate_inputs import INPUTS

QUALITY_LEVELS: tuple[str, ...] = ("full", "standard", "minimal")  # core.context.sections.QUALITY_LEVELS, richest first
SCHEMAS: tuple[str, ...] = ("plain", "rubric")  # core.prompt.risk_schema.PLAIN / RUBRIC
WITH_FLOOR = ".with-floor"
VISITS_SUFFIX = ".visits"
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class EvalConfiguration:
    """One pass over the scenarios. `endpoint` None = the servers of the `llm` resource (LLAMA_SERVER_URL)."""

    name: str
    quality_level: str
    endpoint: str | None = None
    description: str = ""
    schema: str = "plain"
    history: bool = False  # history facts (from a scenario's `history`) for the floor and the prompt
    llm: bool = True  # False: the evidence floor alone, no server
    scenario_set: str = ""  # "" the project's set; "frigate" / "visits" the others (their names start `<set>.`)
    visits: bool = False  # batches linked into visits and each floor raised by its visit (evaluation/visit_floors.py)
    inputs: str = "enriched"  # "frigate": the scenarios' detections cut to what Frigate sends (`.frigate-inputs`)

    def __post_init__(self) -> None:
        if self.quality_level not in QUALITY_LEVEL_TYPES:
            raise ValueError(
                f"configuration {self.name!r}: quality level {self.quality_level!r} is not one of "
                f"{sorted(QUALITY_LEVEL_TYPES)}"
            )
        if self.inputs not in INPUTS:
            raise ValueError(f"configuration {self.name!r}: inputs {self.inputs!r} is not one of {INPUTS}")
        if self.schema not in SCHEMAS:
            raise ValueError(f"configuration {self.name!r}: schema {self.schema!r} is not one of {SCHEMAS}")
        if not self.name or _KEY_CHARS.search(self.name):
            raise ValueError(f"configuration name {self.name!r}: use letters, digits, '_', '.' and '-' only")

    @property
    def model_name(self) -> str:
        return self.name

    @property
    def with_floor_name(self) -> str:
        return self.name + WITH_FLOOR

    @property
    def floor_name(self) -> str:
        prefix = f"{self.scenario_set}." if self.scenario_set else ""
        return (
            f"{prefix}floor.{self.quality_level}"
            + (".history" if self.history else "")
            + inputs_suffix(self.inputs)
            + (VISITS_SUFFIX if self.visits else "")
        )

    def stored_names(self) -> list[str]:
        """The configurations this pass stores, in report order."""
        if not self.llm:
            return [self.floor_name]
        return [self.model_name, self.with_floor_name, self.floor_name]


def endpoint_key(url: str) -> str:
    """A partition-key-safe name for an endpoint: host and port (`127.0.0.1_8091`)."""
    bare = re.sub(r"^[a-z]+://", "", url.strip().rstrip("/"))
    return _KEY_CHARS.sub("_", bare).strip("_") or "endpoint"


def _suffix(schema: str, history: bool, visits: bool = False) -> str:
    return (
        (".rubric" if schema == "rubric" else "") + (".history" if history else "") + (VISITS_SUFFIX if visits else "")
    )


def configurations_for(
    endpoints: Sequence[str],
    quality_levels: Sequence[str],
    labels: Sequence[str] = (),
    *,
    schemas: Sequence[str] = ("plain",),
    history: Sequence[bool] = (False,),
    visits: Sequence[bool] = (False,),
) -> list[EvalConfiguration]:
    """Every endpoint x quality level x schema x history x visits, named `<label>.<level>[.rubric][.history][.visits]`;
    the label
    defaults to the endpoint's host and port (give one per endpoint to keep runs of different models on the same URL
    apart). No endpoint: the `llm` resource's servers, named by the level alone."""
    levels = list(dict.fromkeys(quality_levels)) or ["full"]
    variants = [
        (schema, with_history, with_visits)
        for schema in dict.fromkeys(schemas)
        for with_history in dict.fromkeys(history)
        for with_visits in dict.fromkeys(visits)
    ]
    if not endpoints:
        if labels:
            raise ValueError("a configuration label needs an endpoint (--label goes with --endpoint)")
        return [
            EvalConfiguration(level + _suffix(schema, hist, vis), level, schema=schema, history=hist, visits=vis)
            for level in levels
            for schema, hist, vis in variants
        ]
    unique = list(dict.fromkeys(url.strip().rstrip("/") for url in endpoints))
    if labels and len(labels) != len(unique):
        raise ValueError(f"{len(labels)} label(s) for {len(unique)} endpoint(s): give one label per endpoint")
    names = list(labels) or [endpoint_key(url) for url in unique]
    return [
        EvalConfiguration(
            f"{name}.{level}{_suffix(schema, hist, vis)}", level, endpoint=url, schema=schema, history=hist, visits=vis
        )
        for name, url in zip(names, unique, strict=True)
        for level in levels
        for schema, hist, vis in variants
    ]


def floor_configurations(
    quality_levels: Sequence[str], history: Sequence[bool] = (False,), visits: Sequence[bool] = (False,)
) -> list[EvalConfiguration]:
    """The evidence floor alone, per quality level (no server), with and/or without visits."""
    levels = list(dict.fromkeys(quality_levels)) or ["full"]
    return [
        EvalConfiguration(f"floor.{level}" + _suffix("plain", hist, vis), level, history=hist, llm=False, visits=vis)
        for level in levels
        for hist in dict.fromkeys(history)
        for vis in dict.fromkeys(visits)
    ]


def inputs_suffix(inputs: str) -> str:
    """How a configuration's stored name says its inputs: nothing for the set as written, `.frigate-inputs`."""
    return "" if inputs == "enriched" else f".{inputs}-inputs"


def for_inputs(configurations: Sequence[EvalConfiguration], inputs: str) -> list[EvalConfiguration]:
    """The same passes on the scenarios cut to `inputs` (core/evaluation/frigate_inputs.py), each stored name
    suffixed (`floor.full.frigate-inputs`, `<label>.full.frigate-inputs`): never mixed with the enriched runs."""
    if inputs == "enriched":
        return list(configurations)
    return [replace(c, name=c.name + inputs_suffix(inputs), inputs=inputs) for c in configurations]


FRIGATE_SET = "frigate"  # the Frigate-shaped set's prefix (`frigate.` and `frigate.profiles.` names)
VISITS_SET = "visits"  # the cross-camera set's prefix (synthetic/visit_situations.py)


def set_of(name: str) -> str:
    """The labeled set a stored configuration was measured on: "frigate", "visits", or "" for the project's set."""
    return next((s for s in (FRIGATE_SET, VISITS_SET) if name.startswith(f"{s}.")), "")


def for_set(configurations: Sequence[EvalConfiguration], scenario_set: str) -> list[EvalConfiguration]:
    """The same passes on another labeled set, every stored name prefixed by the set's (`frigate.full`,
    `frigate.floor.full`): the sets' results never mix in one configuration."""
    if not scenario_set:
        return list(configurations)
    return [replace(c, name=f"{scenario_set}.{c.name}", scenario_set=scenario_set) for c in configurations]


def default_configurations() -> list[EvalConfiguration]:
    """What `definitions.py` registers: every quality level on the pipeline's own server(s), plain schema, plus the
    rubric schema at the full level."""
    return [
        *configurations_for([], QUALITY_LEVELS),
        *configurations_for([], ["full"], schemas=["rubric"]),
    ]
