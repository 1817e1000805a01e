"""Issue 38's measurement: a simulated household fortnight, false alarms per night before and after the household's
corrections, and every real threat's level after them (tests/support/household_fortnight.py says what happens).

Two runs of the same nights through the pipeline's storage and evidence floor: "before" where the household never
corrects, "after" where it corrects from Home Assistant through a real mosquitto (buttons and a notification action
on `<prefix>/<camera>/correction`, stored by the verdict publisher's session). Verdicts are floor-only: the model
is not what is measured (household exceptions lift floor rules only). Everything is written to a temporary folder
unless --db names the database of the corrected run (then `hsi eval --household` can replay it).

    .venv/bin/python bench/household_fortnight.py [--nights 14] [--db /tmp/fortnight.duckdb]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.household_fortnight import Fortnight, fortnight_start, run_fortnight  # noqa: E402
from tests.support.mosquitto import running_broker  # noqa: E402


def table(before: Fortnight, after: Fortnight) -> list[str]:
    lines = [
        "night | false alarms before | after (neighbour's car, resident no face) | threats after corrections",
        "------|---------------------|-------------------------------------------|--------------------------",
    ]
    for night in after.nights():
        car = after.false_alarms(night, "neighbour's car")
        resident = after.false_alarms(night, "resident, no face")
        threats = ", ".join(f"{j.event.name} {j.level}" for j in after.threats(night)) or "-"
        after_cell = f"{after.false_alarms(night)} ({car}, {resident})"
        lines.append(f"{night:5d} | {before.false_alarms(night):19d} | {after_cell:<41} | {threats}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=14)
    parser.add_argument("--db", type=Path, help="where to keep the corrected run's database (default: a temp folder)")
    args = parser.parse_args()
    if args.db is not None and args.db.exists():
        print(f"{args.db} exists: name a new file (the fortnight is written from scratch)", file=sys.stderr)
        return 2
    started = time.monotonic()
    start = fortnight_start(args.nights)
    with tempfile.TemporaryDirectory() as folder:
        before = run_fortnight(Path(folder) / "before.duckdb", args.nights, start, None)
        with running_broker(Path(folder) / "broker") as broker:
            after = run_fortnight(args.db or Path(folder) / "after.duckdb", args.nights, start, broker)
    print(f"household fortnight: {args.nights} nights from {start:%Y-%m-%d} (UTC), floor-only verdicts")
    print("\n".join(table(before, after)))
    harmless = [j for j in before.judged if not j.event.threat]
    threats = [j for j in after.judged if j.event.threat]
    print(
        f"false alarms: {sum(map(before.false_alarms, before.nights()))} before, "
        f"{sum(map(after.false_alarms, after.nights()))} after ({len(harmless)} harmless events); "
        f"threats high or critical after corrections: {sum(j.level in ('high', 'critical') for j in threats)} "
        f"of {len(threats)}"
    )
    ways: dict[str, int] = {}
    for row in after.corrections:
        ways[row["direction"]] = ways.get(row["direction"], 0) + 1
    print(
        f"corrections stored (mqtt): {len(after.corrections)} "
        f"({', '.join(f'{n} {way}' for way, n in sorted(ways.items()))}); refused: {len(after.refusals)}"
    )
    for exception in after.exceptions:
        print(f"exception: {exception.explain()}")
    for refused in after.refused:
        print(
            f"refused as an exception: {refused.pattern.describe()} "
            f"({refused.corrections} corrections): {refused.reason}"
        )
    print(f"took {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
