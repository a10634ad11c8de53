"""The parts of the peer benchmark that need no peer (tests/bench/peer_bench.py, tests/bench/peer_hstu.py): the busy
core's life, the paired ratio's interval against simulated step times of known ratio, the FLOP check, and the
reasons given when the peer is missing."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tests.bench import peer_hstu as P
from tests.bench.peer_bench import busy_core, interleaved_seconds, paired_ratio


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc), at the clock-tick resolution."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_core_spins_while_open_and_is_stopped_after_an_error():
    with pytest.raises(RuntimeError, match="inside"):
        with busy_core() as proc:
            assert proc is not None and proc.poll() is None
            start, deadline = _cpu_seconds(proc.pid), time.monotonic() + 20
            while _cpu_seconds(proc.pid) - start < 0.2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _cpu_seconds(proc.pid) - start >= 0.2  # it burns CPU (a sleeping child would not)
            raise RuntimeError("inside")
    assert proc.poll() is not None  # killed and reaped by the context, despite the error


def test_busy_core_ends_by_itself_at_its_limit():
    with busy_core(limit_s=0.3) as proc:
        assert proc is not None
        proc.wait(timeout=20)  # the loop's own bound, not the context's kill
        assert proc.returncode == 0


def test_busy_core_disabled_starts_nothing():
    with busy_core(False) as proc:
        assert proc is None


def test_interleaved_rounds_alternate():
    calls: list[str] = []
    times = interleaved_seconds([lambda: calls.append("a"), lambda: calls.append("b")], rounds=3, warmup=1)
    assert calls == ["a", "b"] * 4 and [len(t) for t in times] == [3, 3]


def test_paired_ratio_covers_the_true_ratio_under_drift():
    # step times drifting by a factor up to 3 between rounds (a shared machine), the peer 1.3 x ours within a
    # round up to independent 5% noise: the paired interval should cover 1.3 in about 95% of runs
    rng = np.random.default_rng(0)
    covered, widths = 0, []
    runs = 200
    for _ in range(runs):
        drift = rng.uniform(1, 3, size=15)
        ours = drift * rng.lognormal(0, 0.05, size=15)
        peer = 1.3 * drift * rng.lognormal(0, 0.05, size=15)
        median, low, high = paired_ratio(ours, peer, n_resamples=999, seed=int(rng.integers(1 << 30)))
        assert low <= median <= high
        covered += low <= 1.3 <= high
        widths.append(high - low)
    assert 0.85 <= covered / runs <= 1.0
    assert np.median(widths) < 0.15  # the drift (a factor of 3) does not widen the interval


def test_paired_ratio_of_identical_ratios_is_exact():
    assert paired_ratio([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == (2.0, 2.0, 2.0)


def test_check_flops_fails_loudly_past_the_tolerance():
    assert P.check_flops({"ours": 100, "research": 91, "stu": 124}) == {"research": 0.91, "stu": 1.24}
    with pytest.raises(P.FlopMismatch, match=r"research 111 \(1\.110 x ours, allowed 10%\)"):
        P.check_flops({"ours": 100, "research": 111, "stu": 100})
    with pytest.raises(P.FlopMismatch, match=r"stu 126 \(1\.260 x ours, allowed 25%\)"):
        P.check_flops({"ours": 100, "research": 100, "stu": 126})


def test_missing_peer_says_what_to_set(monkeypatch, tmp_path):
    monkeypatch.delenv(P.CHECKOUT_ENV, raising=False)
    with pytest.raises(P.PeerUnavailable, match=P.CHECKOUT_ENV):
        P.import_peer()
    monkeypatch.setenv(P.CHECKOUT_ENV, str(tmp_path))
    with pytest.raises(P.PeerUnavailable, match="no generative_recommenders package"):
        P.import_peer()
