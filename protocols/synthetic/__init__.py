"""Synthetic RecFlow-format log with a planted, known truth: `generate(scale, out, seed=0) -> Path` writes it
atomically, and the `recflow` reader reads it back (the `synthetic` source adds `true_p`). The folder, the
scales, the planted worlds and the generative model (world, requests, exposures, labels; every strength a field of
`config.SyntheticConfig`): docs/data.md, "The synthetic log".
"""
from __future__ import annotations

from .config import DEFAULT_WORLD, SCALES, WORLDS, SyntheticConfig, scale_config
from .pipeline import MARKER, build_log, generate, is_complete

__all__ = ["DEFAULT_WORLD", "SCALES", "WORLDS", "SyntheticConfig", "scale_config", "generate", "build_log",
           "is_complete", "MARKER"]
