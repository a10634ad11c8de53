"""`output_diff` (tests/output_diff.py): what counts as the same analysis output, checked on hand-made cases where the
answer is known (a last-digit kernel difference, a rounding flip, a changed word, a changed count)."""
from __future__ import annotations

import math

from output_diff import ABS_TOL, REL_TOL, json_differences, text_differences


def test_floats_within_the_relative_tolerance_are_the_same_and_beyond_it_differ():
    x = 0.024627581884771182
    assert json_differences({"a": [x, 1, "s"]}, {"a": [x * (1 + 1e-13), 1, "s"]}) == []
    assert json_differences({"a": x}, {"a": x * (1 + 10 * REL_TOL)}) != []
    assert json_differences(-2.0948866169470323e-4, -2.0948866169469976e-4) == []  # a demo pair, 1.7e-14 apart
    assert json_differences(1e-17, -3e-17) == []  # cancels to about zero: within ABS_TOL
    assert json_differences(0.0, 10 * ABS_TOL) != []
    assert json_differences(math.nan, math.nan) == []


def test_strings_integers_booleans_keys_and_lengths_must_be_equal():
    assert json_differences({"n": 12}, {"n": 13}) == ["/n: 12 != 13"]
    assert json_differences({"v": "significant"}, {"v": "not significant"}) != []
    assert json_differences({"b": True}, {"b": 1}) != []
    assert json_differences({"a": 1}, {"a": 1, "b": 2}) == ["/b: only in the second"]
    assert json_differences([1.0, 2.0], [1.0]) == ["(top): 2 items != 1 items"]
    assert json_differences(None, 0.0) != []


def test_report_numbers_may_differ_in_their_last_printed_digit_only():
    assert text_differences("| hstu | 0.6835 | p = 0.031 |", "| hstu | 0.6836 | p = 0.031 |") == []
    assert text_differences("gain 1.2e-05", "gain 1.3e-05") == []
    assert text_differences("| hstu | 0.6835 |", "| hstu | 0.6837 |") != []  # two units: a real change
    assert text_differences("3 seeds", "4 seeds") != []  # counts exactly
    assert text_differences("0.68", "0.683") != []  # another precision
    assert text_differences("WHALE is better (p = 0.01)", "WHALE is worse (p = 0.01)") != []
    assert text_differences("a\nb", "a") == ["(text): 2 lines != 1 lines"]


def test_what_an_iterative_optimiser_fits_is_compared_at_its_own_precision():
    """The saturating curve's parameters (and a form check that includes it) move with the BLAS kernel by
    up to 1e-5 relative on a nearly flat fit: compared at 1e-4. A closed-form fit beside it stays at 1e-9."""
    sat = {"form": "saturating", "params": {"A": 1.0955648694889849e-07 * 1e7}}
    assert json_differences(sat, {"form": "saturating", "params": {"A": 1.0955663188279766e-07 * 1e7}}) == []
    assert json_differences(sat, {"form": "saturating", "params": {"A": 1.1e-07 * 1e7}}) != []
    power = {"form": "power law of the gain", "params": {"slope": 0.178}}
    assert json_differences(power, {"form": "power law of the gain", "params": {"slope": 0.178 * (1 + 1e-6)}}) != []
    check = {"forms": [power, sat], "best_margin_se": 0.34038293225250055}
    assert json_differences(check, {"forms": [power, sat], "best_margin_se": 0.34038293660728614}) == []


def test_a_held_out_error_is_compared_on_its_predictions_scale():
    """A held-out cell's error is a prediction (precise to 1e-4 relative) minus an observation: an error of
    0.006 on a loss of 0.45 moved by 5e-6 (1e-5 of the prediction) is the same fit; moved by 1e-4 of the
    prediction it is not. Outside an iterative fit the same entry stays at the closed-form tolerance."""
    cell = {"observed": 0.45, "predicted": 0.456, "error": 0.006}
    moved = {"observed": 0.45, "predicted": 0.456 + 5e-6, "error": 0.006 + 5e-6}
    far = {"observed": 0.45, "predicted": 0.456 + 1e-4, "error": 0.006 + 1e-4}
    fit = {"form": "loss surface L(N, D)"}
    assert json_differences({**fit, "held_out": [cell]}, {**fit, "held_out": [moved]}) == []
    assert json_differences({**fit, "held_out": [cell]}, {**fit, "held_out": [far]}) != []
    assert json_differences({"held_out": [cell]}, {"held_out": [moved]}) != []
