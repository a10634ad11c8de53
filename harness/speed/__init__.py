"""Speed: the counted cost and matmul rate (`matmul`), timing and profiling training steps and the
loader's rate (`throughput`; a sweep's wall-time estimate times its steps with it: `harness.sweep.dry_run`).
What each measures: docs/training.md ("Speed") and docs/sweeps.md.
"""
