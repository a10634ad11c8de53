"""History protocols, registered in `protocols.PROTOCOLS`: `exposure` (protocols/legal_history.py) and
`author50` (protocols/author_history.py), each a frozen dataclass of its parameters. A protocol turns target
requests into an int32 [R, L] matrix of exposure-log rows (PAD_ROW = -1), valid entries left-aligned in
ascending time; the rules: docs/protocols.md, "Legal history" and "`author50` protocol".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from core.typed_config import ConfigError

from . import register
from .author_history import author50_history_rows
from .availability import UserTimeline
from .legal_history import PAD_ROW, legal_history_rows
from .log import ExposureLog
from .recflow import AUTHOR50_LEN

__all__ = ["PAD_ROW", "HistoryIndex", "ExposureProtocol", "Author50Protocol"]


@dataclass(frozen=True)
class HistoryIndex:
    """History index matrix of the target requests plus protocol diagnostics (go to the manifest)."""

    rows: np.ndarray  # int32 [R, L]
    diagnostics: dict[str, float] = field(default_factory=dict)


@register("exposure")
@dataclass(frozen=True)
class ExposureProtocol:
    """Legal history from the full exposure log with a feedback delay (seconds)."""

    history_len: int = 128
    delay_s: float = 60.0

    def __post_init__(self) -> None:
        _check_history_len(self.history_len)
        if self.delay_s < 0:
            raise ConfigError(f"delay_s: must be >= 0, got {self.delay_s}")

    def build(
        self, log: ExposureLog, request_rows: np.ndarray, *, timeline: UserTimeline | None = None,
              progress: bool = False
    ) -> HistoryIndex:
        """History of each target request, given one representative log row per request."""
        timeline = (timeline or UserTimeline.build(log)).with_delay(int(round(self.delay_s * 1000)))
        rows = legal_history_rows(
            timeline,
            log["user_id"][request_rows],
            log["request_timestamp"][request_rows],
            self.history_len,
            progress=progress,
        )
        return HistoryIndex(rows)


@register("author50")
@dataclass(frozen=True)
class Author50Protocol:
    """RecFlow's recent-50 effective-view arrays, linked to exposure rows (no delay parameter)."""

    #: Version of the linking rules, part of the artifact key: artifacts built under older rules (before
    #: duplicated (request_id, video_id) pairs were disambiguated, version 1) are never reused.
    RULES_VERSION: ClassVar[int] = 2

    history_len: int = AUTHOR50_LEN

    def __post_init__(self) -> None:
        _check_history_len(self.history_len, AUTHOR50_LEN)

    def ensure_inputs(self, source: str, root: Path, *, progress: bool = False) -> None:
        """A synthetic log is written without the author-50 pickles unless asked; add them now. Other
        sources' readers report missing pickles themselves."""
        if source == "synthetic":
            from .synthetic.pipeline import ensure_author50

            ensure_author50(Path(root), progress=progress)

    def build(
        self, log: ExposureLog, request_rows: np.ndarray, *, timeline: UserTimeline | None = None,
              progress: bool = False
    ) -> HistoryIndex:
        timeline = timeline or UserTimeline.build(log)
        rows, coverage = author50_history_rows(log, timeline, request_rows, self.history_len, progress=progress)
        return HistoryIndex(rows, {"link_coverage": coverage.as_dict()})  # type: ignore[dict-item]


def _check_history_len(history_len: int, most: int | None = None) -> None:
    if history_len < 1 or (most is not None and history_len > most):
        bound = f"in 1..{most}" if most is not None else ">= 1"
        raise ConfigError(f"history_len: must be {bound}, got {history_len}")
