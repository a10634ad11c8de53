"""Sweeps: a YAML file -> validated schema -> trial plan -> Ray Tune -> run folders -> runs.parquet.

    schema.py     the sweep YAML schema, validated at load (`load_sweep`)
    plan.py       grid expansion into trials and distinct datasets
    dry_run.py    the `--dry-run` table of a plan (FLOPs and wall-time estimates: harness.speed)
    model_keys.py  model settings of a sweep: keys for every architecture and keys scoped to one
    datasets.py   generating / preparing every distinct dataset once, before any trial
    dataset_facts.py  datasets.json: each prepared dataset's targets and history, and how every two differ
    trainable.py  the Ray Tune function trainable around `harness.train.train_run`
    retry_config.py  the `retry:` section; retry.py  training an unhealthy trial again at a lower learning rate
    tuning_config.py  the `tuning:` section; tuning.py  the tuning stage's choice per setting, tuning.json
    tracking.py   trials into an MLflow store (Tune's MLflow callback); the `tracking:` key is schema.py's
    launcher.py   the stages: Tuner (tuning / Optuna search / grid), resume, summary
    interrupt.py  Ctrl-C: stop at the next Tune step, within seconds
    ray_sessions.py  the Ray session: join (address check) or start, shut down; records of local sessions
                  and removal of what a killed driver left
    collect.py    results/<sweep>/runs.parquet from the run folders
"""
from .schema import Sweep, SweepConfig, load_sweep, parse_sweep

__all__ = ["Sweep", "SweepConfig", "load_sweep", "parse_sweep"]
