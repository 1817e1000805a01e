"""The evaluation of judgment quality: passes over the labeled scenarios (configurations.py), the engine that runs
them through production's code and stores the figures (engine.py), and the charts of the report (charts.py).

The `evaluation` asset (assets/evaluation.py) and `hsi eval` (cli/eval.py) are thin faces over `engine`.
"""
