"""Harness: one run (the recipe `train.py` and what it calls) and many (`sweep/`), speed (`speed/`) and the columns
of runs.parquet (`runs_columns.py`); the map of the modules: docs/architecture.md.
"""
