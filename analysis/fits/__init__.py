"""Scaling fits: gain against compute, loss against model and data size (docs/analysis.md, *Scaling fits* on)."""
