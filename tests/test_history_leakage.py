"""Leakage test: the vectorised legal history equals a brute-force reference, target by target.

The reference (tests/tiny_logs.py::reference_history) checks the four conditions (same user,
other request, earlier request time, feedback available before t) event by event in plain Python
and keeps the L most recent by (request_timestamp, request_id, event_id).
"""
from __future__ import annotations

import numpy as np
import pytest
from tiny_logs import random_log, reference_availability, reference_history

from protocols.availability import UserTimeline
from protocols.history import PAD_ROW, Author50Protocol, ExposureProtocol
from protocols.legal_history import legal_history_rows


def _event_ids(log, rows: np.ndarray) -> list[list[int]]:
    return [[int(log["event_id"][j]) for j in r if j != PAD_ROW] for r in rows]


def _hard_cases(log, delay_ms: int, L: int) -> dict[str, bool]:
    """Which of the hard cases the log exhibits (so the comparison cannot pass vacuously)."""
    avail = reference_availability(log, delay_ms)
    req_t = {int(r): int(t) for r, t in zip(log["request_id"], log["request_timestamp"])}
    req_u = {int(r): int(u) for r, u in zip(log["request_id"], log["user_id"])}
    pairs = {(req_u[r], req_t[r]) for r in req_t}
    same_ts = len(pairs) < len(req_t)
    boundary = any(avail[r] == req_t[q] and req_u[r] == req_u[q] for r in req_t for q in req_t)
    empty = more_than_l = recent_illegal = False
    for row in range(len(log)):
        hist = reference_history(log, row, delay_ms, len(log), avail)
        empty |= not hist
        more_than_l |= len(hist) > L
        t, u = req_t[int(log["request_id"][row])], req_u[int(log["request_id"][row])]
        earlier = [q for q in req_t if req_u[q] == u and req_t[q] < t]
        if earlier and hist:
            latest = max(earlier, key=lambda q: (req_t[q], q))
            recent_illegal |= avail[latest] >= t
    return {"same_ts": same_ts, "boundary": boundary, "empty": empty, "more_than_L": more_than_l,
            "recent_illegal_older_legal": recent_illegal}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("delay_ms,L", [(0, 4), (20_000, 6), (60_000, 3)])
def test_vectorised_history_equals_brute_force(seed, delay_ms, L):
    log = random_log(seed)
    cases = _hard_cases(log, delay_ms, L)
    assert all(cases.values()), cases
    rows = np.arange(len(log))  # every exposure is a target
    got = ExposureProtocol(history_len=L, delay_s=delay_ms / 1000).build(log, rows).rows
    assert got.shape == (len(log), L) and got.dtype == np.int32
    avail = reference_availability(log, delay_ms)
    expected = [reference_history(log, int(i), delay_ms, L, avail) for i in rows]
    assert _event_ids(log, got) == expected
    # valid entries are left-aligned (no valid entry after a PAD)
    valid = got != PAD_ROW
    assert np.all(valid[:, :-1] | ~valid[:, 1:])


def test_widening_search_with_tiny_windows_and_chunks():
    """slack=0 and chunks of 7 force the repeated window widening on almost every row."""
    log = random_log(5, n_requests=200, n_users=3)
    tl = UserTimeline.build(log).with_delay(30_000)
    L = 9
    got = legal_history_rows(tl, log["user_id"], log["request_timestamp"], L, chunk=7, slack=0)
    avail = reference_availability(log, 30_000)
    expected = [reference_history(log, i, 30_000, L, avail) for i in range(len(log))]
    assert _event_ids(log, got) == expected


def test_history_longer_than_any_user_past():
    log = random_log(6)
    L = len(log) + 5
    got = ExposureProtocol(history_len=L, delay_s=0).build(log, np.arange(len(log))).rows
    avail = reference_availability(log, 0)
    assert _event_ids(log, got) == [reference_history(log, i, 0, L, avail) for i in range(len(log))]


def test_author50_links_back_and_reports_coverage():
    log = random_log(7, author50=True, n_requests=60)
    rows = np.arange(len(log))
    built = Author50Protocol(history_len=50).build(log, rows)
    cov = built.diagnostics["link_coverage"]
    # reference: present rows of each request's array, linked by (request_id, video_id) in plain Python
    exposure_of = {}
    for j in range(len(log)):
        exposure_of.setdefault((int(log["request_id"][j]), int(log["video_id"][j])), j)
    present = linked = 0
    for i in rows:
        arr = log.author50_loader(int(log["file_index"][i]))[int(log["request_id"][i])]
        hits = []
        for line in arr:
            if line[7] > 0:
                present += 1
                j = exposure_of.get((int(line[9]), int(line[0])))
                if j is not None:
                    linked += 1
                    hits.append(j)
        hits.sort(key=lambda j: (log["request_timestamp"][j], log["request_id"][j], log["event_id"][j]))
        assert [int(log["event_id"][j]) for j in hits] == _event_ids(log, built.rows[i : i + 1])[0]
    assert cov["rows_present"] == present and cov["rows_linked"] == linked
    assert 0 < linked < present  # the tiny arrays hold some unlinkable rows on purpose
    assert cov["request_key_coverage"] == 1.0
    assert cov["rows_not_before_target"] == 0


_MATCH_FIELDS = ("author_id", "category_level_two", "category_level_one", "upload_type", "upload_timestamp",
                 "duration", "request_timestamp", "playing_time")  # array columns 1..8


def _reference_author50(log, target_row: int, L: int) -> tuple[list[int], dict[str, int]]:
    """event_ids of the author50 history of one target by brute force, and its disambiguation counts.

    Each present array row: candidates = every exposure with its (request_id, video_id); several ->
    most array fields equal, then effective view; the k-th repeat of the pair in this array takes the
    k-th remaining candidate in log order. Kept: effective views of the target's user strictly
    before it, each exposure once; ordered by (request_timestamp, request_id, event_id), last L."""
    arr = log.author50_loader(int(log["file_index"][target_row]))[int(log["request_id"][target_row])]
    counts = {"rows_disambiguated": 0, "resolved_by_fields": 0, "resolved_by_feedback": 0, "still_tied": 0}
    seen_pairs: dict[tuple[int, int], int] = {}
    kept: list[int] = []
    for line in arr:
        if line[7] <= 0:
            continue
        pair = (int(line[9]), int(line[0]))
        cands = [j for j in range(len(log)) if (int(log["request_id"][j]), int(log["video_id"][j])) == pair]
        if not cands:
            continue
        k = seen_pairs.get(pair, 0)
        seen_pairs[pair] = k + 1
        if len(cands) == 1:
            j = cands[0]
        else:
            fields = {j: sum(int(log[f][j]) == int(line[c + 1]) for c, f in enumerate(_MATCH_FIELDS)) for j in cands}
            top_fields = [j for j in cands if fields[j] == max(fields.values())]
            top = [j for j in top_fields if log["effective_view"][j] == 1] or top_fields
            counts["rows_disambiguated"] += 1
            if len(top_fields) == 1:
                counts["resolved_by_fields"] += 1
            elif len(top) == 1:
                counts["resolved_by_feedback"] += 1
            else:
                counts["still_tied"] += 1
            j = top[k % len(top)]
        ok = (log["effective_view"][j] == 1 and log["user_id"][j] == log["user_id"][target_row]
              and log["request_timestamp"][j] < log["request_timestamp"][target_row] and j not in kept)
        if ok:
            kept.append(j)
    kept.sort(key=lambda j: (log["request_timestamp"][j], log["request_id"][j], log["event_id"][j]))
    return [int(log["event_id"][j]) for j in kept[-L:]], counts


@pytest.mark.parametrize("seed,L", [(11, 50), (12, 5)])
def test_author50_resolves_duplicated_pairs(seed, L):
    """Duplicated (request_id, video_id) pairs whose rows differ in feedback (and sometimes playing
    time) link to the right exposure: the vectorised links equal the brute-force reference, every
    entry is an effective view of the user strictly before the target in time order, linked content
    equals the rows the arrays were built from, and the manifest counts the disambiguated entries."""
    log = random_log(seed, author50=True, n_requests=80, n_videos=15, duplicate_share=0.3)
    keys = list(zip(log["request_id"].tolist(), log["video_id"].tolist()))
    assert len(set(keys)) < len(keys)  # the log really repeats pairs
    first_request_rows = np.unique(log["request_id"], return_index=True)[1]
    built = Author50Protocol(history_len=L).build(log, first_request_rows)
    cov = built.diagnostics["link_coverage"]
    got = _event_ids(log, built.rows)
    totals = {"rows_disambiguated": 0, "resolved_by_fields": 0, "resolved_by_feedback": 0, "still_tied": 0}
    row_of = {int(e): j for j, e in enumerate(log["event_id"])}
    first_row_wrong = 0
    for r, target in enumerate(first_request_rows):
        expected, counts = _reference_author50(log, int(target), L)
        assert got[r] == expected
        for k, v in counts.items():
            totals[k] += v
        hist = [row_of[e] for e in got[r]]
        assert all(log["effective_view"][j] == 1 for j in hist)
        assert all(log["user_id"][j] == log["user_id"][target] for j in hist)
        assert all(log["request_timestamp"][j] < log["request_timestamp"][target] for j in hist)
        order = [(log["request_timestamp"][j], log["request_id"][j], log["event_id"][j]) for j in hist]
        assert order == sorted(order)
        # content: the linked rows are (field for field) the rows the array was built from
        sources = log.author50_loader.sources[int(log["request_id"][target])]
        truth = sorted(tuple(int(log[f][j]) for f in ("request_id", "video_id", "effective_view", *_MATCH_FIELDS))
                       for j in sources if j is not None)
        linked = sorted(tuple(int(log[f][j]) for f in ("request_id", "video_id", "effective_view", *_MATCH_FIELDS))
                        for j in hist)
        assert linked == truth if L >= len(truth) else set(linked) <= set(truth)
        # the old rule (first row of the pair) would have linked some non-effective rows
        for j in sources:
            if j is not None:
                first = keys.index((int(log["request_id"][j]), int(log["video_id"][j])))
                first_row_wrong += int(log["effective_view"][first] == 0)
    assert first_row_wrong > 0
    assert {k: cov[k] for k in totals} == totals
    assert totals["resolved_by_fields"] > 0 and totals["resolved_by_feedback"] > 0 and totals["still_tied"] > 0
    assert cov["rows_not_effective"] == cov["rows_other_user"] == cov["rows_not_before_target"] == 0
