"""Sweeps: a YAML file -> validated schema (`schema.py`) -> trial plan (`plan.py`) -> Ray Tune (`launcher.py`) -> run
folders -> runs.parquet (`collect.py`). The map of the modules: docs/architecture.md; the user's view: docs/sweeps.md.
"""
