"""The one batch policy (sensor and `hsi process`): each closed window once, failed ones retried with back-off,
given up after MAX_ATTEMPTS; the sensor's cursor on top of it."""

import json

from hsi_dagster.core.intake.batch_policy import (
    MAX_ATTEMPTS,
    BatchHistory,
    Candidate,
    PastRun,
    WindowCursor,
    choose_batches,
    history_from_runs,
    merge_history,
    plan_tick,
)

NOW = 1_800_000_000.0


def test_each_closed_window_requested_once_across_ticks_and_restarts():
    first = plan_tick(WindowCursor(), ["a", "b"], {}, NOW, cap=10)
    assert [r.run_key for r in first.requests] == ["a", "b"]
    assert first.new_partitions == ["a", "b"]
    again = plan_tick(first.cursor, ["a", "b"], {}, NOW + 5, cap=10)
    assert again.requests == []
    restarted = WindowCursor.from_json(first.cursor.to_json())  # a new sensor process with the stored cursor
    assert plan_tick(restarted, ["a", "b", "c"], {}, NOW + 10, cap=10).requests[0].run_key == "c"


def test_cap_defers_the_rest_to_the_next_tick_without_skipping():
    closed = [f"b{i}" for i in range(7)]
    tick1 = plan_tick(WindowCursor(), closed, {}, NOW, cap=3)
    assert [r.batch_id for r in tick1.requests] == closed[:3] and tick1.deferred == 4
    tick2 = plan_tick(tick1.cursor, closed, {}, NOW + 1, cap=3)
    tick3 = plan_tick(tick2.cursor, closed, {}, NOW + 2, cap=3)
    requested = [r.batch_id for t in (tick1, tick2, tick3) for r in t.requests]
    assert requested == closed  # each exactly once, in order


def test_assessed_batches_leave_the_cursor():
    tick1 = plan_tick(WindowCursor(), ["a"], {}, NOW, cap=10)
    recorded = plan_tick(tick1.cursor, [], {"a": NOW + 1}, NOW + 2, cap=10)  # recorded, run still going
    assert recorded.requests == [] and "a" in recorded.cursor.requested
    done = plan_tick(recorded.cursor, [], {}, NOW + 3, cap=10)  # assessment stored
    assert done.cursor.requested == {}


def test_failed_batch_is_retried_after_grace_with_a_new_run_key_then_abandoned():
    cursor = plan_tick(WindowCursor(), ["a"], {}, NOW, cap=10, grace_seconds=60).cursor
    assert plan_tick(cursor, [], {"a": NOW}, NOW + 30, cap=10, grace_seconds=60).requests == []
    keys = []
    t = NOW
    for _ in range(MAX_ATTEMPTS + 2):
        t += 60 * 2**MAX_ATTEMPTS
        plan = plan_tick(cursor, [], {"a": NOW}, t, cap=10, grace_seconds=60)
        keys += [r.run_key for r in plan.requests]
        cursor = plan.cursor
    assert keys == [f"a#retry{i}" for i in range(1, MAX_ATTEMPTS)]
    assert len(set(keys)) == len(keys)
    assert cursor.abandoned == ["a"]


def test_recorded_batch_unknown_to_the_cursor_is_requested_only_after_grace():
    """E.g. a run of `hsi process` that failed: the sensor takes it over once it is clearly not running."""
    assert plan_tick(WindowCursor(), [], {"x": NOW}, NOW + 10, cap=10, grace_seconds=60).requests == []
    plan = plan_tick(WindowCursor(), [], {"x": NOW}, NOW + 61, cap=10, grace_seconds=60)
    assert [r.run_key for r in plan.requests] == ["x"] and plan.new_partitions == []


def test_closed_batch_whose_run_failed_before_recording_is_requested_again_after_grace():
    """The run of a closed window failed before `detection_batches` recorded it: the window is still closed and
    unrecorded, so it comes back in `closed` every tick. It must be requested again once the grace has passed."""
    first = plan_tick(WindowCursor(), ["a"], {}, NOW, cap=10, grace_seconds=60)
    assert [r.run_key for r in first.requests] == ["a"]
    early = plan_tick(first.cursor, ["a"], {}, NOW + 30, cap=10, grace_seconds=60)
    assert early.requests == []  # the first run may still be going
    later = plan_tick(early.cursor, ["a"], {}, NOW + 61, cap=10, grace_seconds=60)
    assert [(r.batch_id, r.run_key, r.attempt) for r in later.requests] == [("a", "a#retry1", 2)]


def test_closed_batch_given_up_like_a_recorded_one_and_reported_once():
    plan = plan_tick(WindowCursor(), ["a"], {}, NOW, cap=10, grace_seconds=60)
    reported = []
    t = NOW
    for _ in range(MAX_ATTEMPTS + 3):
        t += 60 * 2**MAX_ATTEMPTS
        plan = plan_tick(plan.cursor, ["a"], {}, t, cap=10, grace_seconds=60)
        reported += plan.abandoned
    assert reported == ["a"] and plan.cursor.requested["a"][0] == MAX_ATTEMPTS


def test_cursor_of_the_previous_format_is_read():
    """A deployed sensor's stored cursor: in_flight = batch -> [attempts, next retry], inf once abandoned."""
    old = json.dumps({"in_flight": {"a": [2, NOW + 1200], "b": [6, float("inf")]}})
    cursor = WindowCursor.from_json(old, grace_seconds=600)
    assert cursor.requested == {"a": [2.0, NOW], "b": [5.0, 0.0]} and cursor.abandoned == ["b"]
    assert WindowCursor.from_json(cursor.to_json()) == cursor
    plan = plan_tick(cursor, [], {"a": NOW - 5, "b": NOW - 5}, NOW + 1200, cap=10, grace_seconds=600)
    assert [r.run_key for r in plan.requests] == ["a#retry2"] and plan.abandoned == []


# ------------------------------------------------------------------ the shared rules (sensor and `hsi process`)
def test_history_from_runs_counts_the_failures_since_the_last_success():
    runs = [
        PastRun("a", created_at=NOW, ended_at=NOW + 20),
        PastRun("a", created_at=NOW + 700, ended_at=NOW + 710),
        PastRun("b", created_at=NOW + 5, ended_at=None),
        PastRun("c", created_at=NOW, ended_at=NOW + 9),
        PastRun("c", created_at=NOW + 10, ended_at=NOW + 50, succeeded=True),
        PastRun("d", created_at=NOW, ended_at=NOW + 50, succeeded=True),
    ]
    history = history_from_runs(runs)
    assert history["a"] == BatchHistory(attempts=2, last_attempt_at=NOW + 710, running=False, runs=2)
    assert history["b"] == BatchHistory(attempts=0, last_attempt_at=None, running=True, runs=1)
    assert history["c"] == BatchHistory(attempts=0, last_attempt_at=None, running=False, runs=2)
    assert "e" not in history


def test_after_a_successful_run_a_batch_without_assessment_starts_again_with_a_new_run_key():
    """E.g. its rows were deleted to assess it again: attempt 1 at once, keyed after the runs it already had."""
    history = history_from_runs([PastRun("d", NOW, NOW + 50, succeeded=True)])
    choice = choose_batches([Candidate("d", recorded_at=NOW + 10)], history, NOW + 60)
    assert [(r.run_key, r.attempt, r.run) for r in choice.requests] == [("d#retry1", 1, 2)]


def test_merge_keeps_the_most_attempts_and_the_latest_time():
    runs = BatchHistory(1, NOW + 30, running=False)  # the instance saw attempt 1 end
    requested = BatchHistory(2, NOW + 10)  # the sensor already asked for attempt 2, not a run yet
    assert merge_history(runs, requested) == BatchHistory(2, NOW + 30, False)
    assert merge_history(None, requested) == requested and merge_history(None, None) == BatchHistory()


def test_running_batches_are_left_alone_and_back_off_doubles_from_the_end_of_the_last_run():
    candidates = [Candidate("run"), Candidate("failed", recorded_at=NOW)]
    history = {
        "run": BatchHistory(1, NOW, running=True),
        "failed": BatchHistory(2, NOW + 100),  # attempt 2 ended at NOW + 100: attempt 3 after 2 x grace
    }
    early = choose_batches(candidates, history, NOW + 100 + 119, grace_seconds=60)
    assert early.requests == [] and early.running == ["run"] and early.waiting == {"failed": NOW + 100 + 120}
    due = choose_batches(candidates, history, NOW + 100 + 120, grace_seconds=60)
    assert [(r.run_key, r.attempt) for r in due.requests] == [("failed#retry2", 3)]


def test_given_up_after_max_attempts_whatever_launched_them():
    history = {"a": BatchHistory(MAX_ATTEMPTS, NOW)}
    choice = choose_batches([Candidate("a")], history, NOW + 10**9)
    assert choice.requests == [] and choice.abandoned == ["a"]


def test_no_cap_requests_every_due_batch_and_a_cap_defers_the_rest():
    candidates = [Candidate(f"b{i}") for i in range(5)]
    assert len(choose_batches(candidates, {}, NOW).requests) == 5
    capped = choose_batches(candidates, {}, NOW, cap=2)
    assert [r.batch_id for r in capped.requests] == ["b0", "b1"] and capped.deferred == 3


def test_the_run_history_is_asked_only_about_batches_it_could_change():
    """Given-up batches and batches within this sensor's own back-off are not looked up: the tick's run-storage
    query stays small however many batches wait or were given up."""
    asked: list[list[str]] = []

    def runs(batch_ids):
        asked.append(list(batch_ids))
        return {"gone": BatchHistory(MAX_ATTEMPTS, NOW - 10**6)}  # the instance knows "gone" was given up

    cursor = WindowCursor(requested={"waiting": [1.0, NOW]}, abandoned=["gone"])
    unassessed = {"waiting": NOW, "gone": NOW - 10**6, "due": NOW - 10**6}
    plan = plan_tick(cursor, ["new"], unassessed, NOW + 60, cap=10, runs=runs, grace_seconds=600)
    assert asked == [["new", "due"]]
    assert [r.batch_id for r in plan.requests] == ["new", "due"]
    assert plan.cursor.abandoned == ["gone"] and plan.abandoned == []  # still given up, not reported again
    assert "waiting" in plan.cursor.requested


def test_runs_found_in_the_instance_decide_over_an_empty_cursor():
    runs = {"a": BatchHistory(2, NOW, running=False), "b": BatchHistory(1, NOW, running=True)}
    plan = plan_tick(WindowCursor(), ["a", "b"], {}, NOW + 1199, cap=10, runs=lambda ids: runs, grace_seconds=600)
    assert plan.requests == []  # a: attempt 3 due at NOW + 1200; b: its run is still going
    later = plan_tick(plan.cursor, ["a", "b"], {}, NOW + 1200, cap=10, runs=lambda ids: runs, grace_seconds=600)
    assert [(r.run_key, r.attempt) for r in later.requests] == [("a#retry2", 3)]
