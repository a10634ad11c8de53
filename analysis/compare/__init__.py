"""Comparisons of runs: pairing, seed-level and DeLong statistics, data-protocol evidence (docs/analysis.md)."""
