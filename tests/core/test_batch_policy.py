"""The batch-window sensor's pure bookkeeping: each closed window once, failed ones retried with back-off."""

from hsi_dagster.core.window_cursor import MAX_ATTEMPTS, WindowCursor, plan_tick

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
    assert recorded.requests == [] and "a" in recorded.cursor.in_flight
    done = plan_tick(recorded.cursor, [], {}, NOW + 3, cap=10)  # assessment stored
    assert done.cursor.in_flight == {}


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


def test_recorded_batch_unknown_to_the_cursor_is_requested_only_after_grace():
    """E.g. a run of `hsi process` that failed: the sensor takes it over once it is clearly not running."""
    assert plan_tick(WindowCursor(), [], {"x": NOW}, NOW + 10, cap=10, grace_seconds=60).requests == []
    plan = plan_tick(WindowCursor(), [], {"x": NOW}, NOW + 61, cap=10, grace_seconds=60)
    assert [r.run_key for r in plan.requests] == ["x"] and plan.new_partitions == []
