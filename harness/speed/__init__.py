"""Speed: the counted cost and matmul rate (`matmul`), timing and profiling training steps and the
loader's rate (`throughput`) and a sweep's compute and wall time (`sweep_estimate`). What each measures:
docs/training.md ("Speed") and docs/sweeps.md.
"""
