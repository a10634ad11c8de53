"""Comparisons of runs: pairing by seed and shared settings, the seed-level and DeLong statistics of each
comparison, claims carried over from other studies, and the evidence on data protocols (docs/analysis.md,
section 2)."""
