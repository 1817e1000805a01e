"""The evaluation of judgment quality: passes over the labeled scenarios (configurations.py), the engine that runs
them through production's steps (hsi_dagster/steps.py) and stores the figures (engine.py), and the report of the
stored figures with its charts (report.py, charts.py).

The `evaluation` asset (assets/evaluation.py) and `hsi eval` (cli/eval.py) are thin faces over `engine` and `report`.
"""
