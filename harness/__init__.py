"""Harness: one run and many.

Run configs (`config.py`), the training recipe with what only it uses: stop signals, the learning-rate schedule's
application, the curve logger (`train.py`), the step and its optimisers (`step.py`), the schedule's config and
formula (`lr_schedule.py`), evaluation and the metric registry (`evaluate.py`,
`metrics.py`, `metric_registry.py`), checkpoints and the run folder (`checkpoint.py`,
`run_folder.py`), learning curves and run health (`curves.py`, `run_health.py`), the machine
fingerprint and process accounting (`fingerprint.py`, `perf.py`), speed measurement and estimates (`speed/`),
the Ray Tune sweeps (`sweep/`) and the columns of runs.parquet (`runs_columns.py`). FLOP
and parameter counts are `architectures.flops`; the command line is `cli/`. The side-by-side benchmark against
generative-recommenders is test code: tests/bench/peer_bench.py and peer_hstu.py.
"""
