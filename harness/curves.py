"""Learning curves of a run: TensorBoard event files in `<run folder>/curves/`, written during training by
`harness.train.CurveLogger` and read back by `read_curves`. The tags, when points are written, and why logging
changes no number: docs/training.md ("Curves").
"""
from __future__ import annotations

from pathlib import Path

from core import results_layout as layout


def read_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """`{tag: [(step, value), ...]}` from a run's event files, sorted by step, the last written value per step
    (a resumed run repeats some steps); empty when the run has none."""
    folder = Path(run_dir) / layout.CURVES_DIR
    if not folder.is_dir():
        return {}
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[str, dict[int, float]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*"), key=lambda p: (p.stat().st_mtime, p.name)):
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                value = v.tensor.float_val[0] if v.HasField("tensor") and v.tensor.float_val else v.simple_value
                out.setdefault(v.tag, {})[int(event.step)] = float(value)
    return {tag: sorted(points.items()) for tag, points in out.items()}
