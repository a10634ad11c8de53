"""Speed: measuring how fast this machine trains and estimating a sweep's time.

    matmul.py          the matmul rate of a device and the counted-FLOP utilisation measured against it
    throughput.py      timing the training step on random batches (`recscale bench --arch`)
    step_breakdown.py  where a step's time goes: matrix products against the rest (`bench --breakdown`)
    loader_rate.py     the loader's targets/s and this machine's copy rate (`recscale bench --data`)
    trial_cost.py      the counted FLOPs of each trial of a sweep plan (`sweep --dry-run`)
    sweep_estimate.py  the wall-time estimate of a sweep (`sweep --dry-run`), from its trials' steps timed now
"""
