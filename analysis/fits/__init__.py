"""Scaling fits: gain against compute (power law, other forms, extrapolations, marginal returns, family comparisons)
and loss against model and data size (docs/analysis.md, *Scaling fits* to *Data as a compute axis*)."""
