"""`AnalysisResult`: everything one analysis of a sweep found, as `analysis.pipeline.analyze` returns it and the
report's sections (analysis/report/sections.py) render it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .collect import SweepResults
from .compare.protocol import ArmFacts, RankComparison
from .compare.questions import AblationResult, QuestionResult
from .fits.data_scaling import DataScaling
from .fits.family_comparison import FamilyComparison
from .fits.reference import Reference
from .fits.scaling import FamilyScaling
from .headline import Headline
from .run_health import RetriedRun, RunHealth


@dataclass
class AnalysisResult:
    results: SweepResults
    scaling: list[FamilyScaling]
    ablations: list[AblationResult]  # every stratum of every comparison question, one Holm family
    headline: Headline | None = None
    comparisons: list[FamilyComparison] = field(default_factory=list)
    reference: Reference | None = None
    plots: dict[str, str] = field(default_factory=dict)  # name -> path relative to the sweep folder
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # scaling notes that are not warnings
    group_note: str = ""  # why there is no grouped-metric plot
    #: expected runs (rows of runs.parquet) whose run folder or files could not be read, one message each
    unread_runs: list[str] = field(default_factory=list)
    #: comparisons that vary a data setting: target sharing and history membership, by ablation index
    arm_facts: dict[int, ArmFacts] = field(default_factory=dict)
    #: target sharing and history membership of every two data arms (None: no datasets.json)
    arm_pairs: list[ArmFacts] | None = None
    ranks: RankComparison | None = None  # rank order of the models per data arm, DiDs between arms
    #: every question of the sweep with its answer (analysis/compare/questions.py), the report's first table
    questions: list[QuestionResult] = field(default_factory=list)
    health: RunHealth | None = None  # every run's status, the runs left out
    #: the L(N, D) fit, only for a sweep that varies data.n_train (analysis/fits/data_scaling.py)
    data_scaling: DataScaling | None = None
    #: the tuning stage's choice per setting (harness.sweep.tuning.TuningChoice; sweeps with `tuning:` only)
    tuning: Any = None
    #: the runs a `retry:` policy trained again (analysis/run_health.py; None for a sweep without one)
    retried: list[RetriedRun] | None = None
