"""Throughput of the synthetic generator (`make bench`): one `small` log (~1M exposures) per round."""
from __future__ import annotations

import shutil

import pytest

from protocols.synthetic import generate


@pytest.mark.bench
def test_synth_small_throughput(benchmark, tmp_path):
    counter = {"i": 0}

    def once():
        counter["i"] += 1
        out = tmp_path / f"small-{counter['i']}"
        generate("small", out, seed=0, author50=False)
        shutil.rmtree(out)

    benchmark.pedantic(once, rounds=1, iterations=1)
    benchmark.extra_info["exposures"] = 1_000_000
