"""Sweeps: a YAML file -> validated schema -> trial plan -> Ray Tune -> run folders -> runs.parquet.

    schema.py     the sweep YAML schema, validated at load (`load_sweep`)
    plan.py       grid expansion into trials and distinct datasets; dry-run cost estimate
    datasets.py   generating / preparing every distinct dataset once, before any trial
    trainable.py  the Ray Tune function trainable around `harness.train.train_run`
    launcher.py   Ray session, Tuner (grid / Optuna search), resume, cluster address
    collect.py    results/<sweep>/runs.parquet from the run folders
"""
from .schema import Sweep, SweepConfig, load_sweep, parse_sweep

__all__ = ["Sweep", "SweepConfig", "load_sweep", "parse_sweep"]
