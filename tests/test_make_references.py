"""`make references` reruns every committed reference study: the Makefile's two lists name each folder under
results/reference/ once, each from its own sweeps/<name>.yaml, and the MovieLens-100k list holds exactly the
sweeps that read RECSCALE_ML100K (they are skipped, with a message, where the data set is absent)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _make_list(name: str) -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(rf"^{name}\s*\?=(.*)$", text, flags=re.MULTILINE)
    assert match, f"Makefile: no {name}"
    return match.group(1).split()


def test_make_references_lists_every_committed_reference():
    plain, ml100k = _make_list("REFERENCE_SWEEPS"), _make_list("REFERENCE_SWEEPS_ML100K")
    committed = sorted(p.name for p in (ROOT / "results" / "reference").iterdir() if p.is_dir())
    assert sorted(plain + ml100k) == committed  # each once
    assert all((ROOT / "sweeps" / f"{name}.yaml").is_file() for name in committed)
    assert sorted(ml100k) == sorted(n for n in committed if "RECSCALE_ML100K" in
                                    (ROOT / "sweeps" / f"{n}.yaml").read_text())
