"""The call-and-repair loop of a risk assessment, written against a plain callable (messages -> reply).

One call with the budgeted messages. If the reply cannot be used (no JSON object, or a required field missing:
see `core.prompt.risk_schema.parse_assessment`), ONE repair call: the same conversation (so the server reuses its
cached prefix) plus the bad reply and what was wrong with it. If that fails too, the batch is stored as
`invalid_output` with the last reply: a model that cannot answer twice will not answer a third time, and the run must
not hang on it. Errors of the call itself (server down, prompt rejected) are the caller's: they propagate unchanged.

`verdict_fields` then joins the model's outcome with the evidence floor and the answering model's trust
(core/verdict/final.py, core/verdict/trust.py): the row's risk_score and risk_level are the verdict's (max of the
model's score and the floor, within the trust), the model's own figures, its level and the trust that applied stay
beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from hsi_dagster.core.prompt.risk_schema import PLAIN, SUMMARY_MAX, ParsedAssessment, parse_assessment, repair_messages
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.final import FLOOR_ONLY, INVALID_OUTPUT, OK, Verdict, final_verdict
from hsi_dagster.core.verdict.trust import Trust

__all__ = ["FLOOR_ONLY", "INVALID_OUTPUT", "OK", "AssessmentOutcome", "assess", "verdict_fields"]


class Reply(Protocol):
    @property
    def content(self) -> str: ...


R = TypeVar("R", bound=Reply)


@dataclass
class AssessmentOutcome(Generic[R]):
    parsed: ParsedAssessment  # the parse that counts: the repair's when the first reply could not be used
    replies: list[R] = field(default_factory=list)  # every call's reply, in order (1 or 2)

    @property
    def ok(self) -> bool:
        return self.parsed.ok

    @property
    def repaired(self) -> bool:
        return len(self.replies) > 1

    @property
    def model_score(self) -> int | None:
        """The model's verdict score (its rubric score in the rubric schema), None without a usable reply."""
        return self.parsed.assessment.verdict_score if self.parsed.assessment is not None else None

    def fields(self) -> dict[str, Any]:
        """The risk_assessments columns that come from the model's reply."""
        raw = self.replies[-1].content
        if not self.parsed.ok or self.parsed.assessment is None:
            return {"status": INVALID_OUTPUT, "error": self.parsed.error, "raw_output": raw}
        assessment = self.parsed.assessment
        return {
            "status": OK,
            "risk_score": assessment.risk_score,
            "risk_level": assessment.risk_level,
            "model_score": assessment.verdict_score,
            "model_risk_level": self.parsed.model_level,
            "summary": assessment.summary,
            "reasoning": assessment.reasoning,
            # Absent optional fields are left out, not null: the stored object matches the schema sent to the server.
            "assessment": assessment.model_dump(mode="json", exclude_none=True),
            "raw_output": raw,
            "error": "; ".join(self.parsed.warnings) or None,
        }


def assess(messages: list[dict], call: Callable[[list[dict]], R], schema: str = PLAIN) -> AssessmentOutcome[R]:
    """Call, and repair once if the reply cannot be used; `schema` (plain | rubric) is the one the call asks for."""
    first = call(messages)
    parsed = parse_assessment(first.content, schema)
    if parsed.ok:
        return AssessmentOutcome(parsed, [first])
    second = call(repair_messages(messages, first.content, parsed.error or "invalid output", schema))
    repaired = parse_assessment(second.content, schema)
    if not repaired.ok:
        repaired.error = f"{repaired.error} (after one repair; the first reply: {parsed.error})"
    return AssessmentOutcome(repaired, [first, second])


def floor_summary(verdict: Verdict) -> str:
    """The summary of a verdict the model did not give (status floor_only): the rules that fired, built from
    structured fields only (no caption or other camera text)."""
    first = verdict.floor_reasons[0] if verdict.floor_reasons else "evidence rules"
    text = f"Evidence rules ({verdict.level}, no usable model output): {first}"
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"


def verdict_fields(outcome: AssessmentOutcome, floor: Floor, trust: Trust | int) -> tuple[dict[str, Any], Verdict]:
    """The risk_assessments columns of the outcome joined with the floor and the trust: the stored score and level
    are the verdict's; the model's reply, its level, its score and the trust that applied stay beside them. A model
    that gave no usable reply but whose batch's floor stands alone (core/verdict/final.py) is stored as `floor_only`
    with the floor's reasons as the summary and reasoning; the model's failure stays in `error` and `raw_output`."""
    fields = outcome.fields()
    verdict = final_verdict(outcome.model_score, floor, trust)
    fields |= verdict.columns()
    fields["status"] = verdict.status
    if verdict.status == FLOOR_ONLY:
        fields["summary"] = floor_summary(verdict)
        fields["reasoning"] = "; ".join(verdict.floor_reasons)
    return fields, verdict
