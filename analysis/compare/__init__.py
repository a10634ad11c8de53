"""Comparisons of runs: pairing by seed, seed-level and DeLong statistics, and the data-protocol evidence
(docs/analysis.md, *Questions* and *The report, in order*)."""
