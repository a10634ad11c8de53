"""Statistics of seeds and test sets, free of sweeps and reports: paired seed-level tests with Holm and power
(paired.py), group-sequential tests of seeds added in rounds (sequential.py), DeLong's test of two AUCs
(delong.py), the seed bootstrap of any fit (bootstrap.py)."""
