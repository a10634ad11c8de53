"""Scaling fits of the gain against compute and of the loss against model and data size: the axes, the power law
with the seed as the unit, the other curve forms and their checks, the extrapolations, marginal returns, family
comparisons, the gain reference and the L(N, D) surface (docs/analysis.md, sections 3 and 4)."""
