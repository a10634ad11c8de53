"""Statistics of seeds and test sets, free of sweeps and reports (docs/architecture.md, `analysis/`)."""
