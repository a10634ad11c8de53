"""The sweep file's `retry:` section: absent by default, typed, and every bad key or value refused with an error
naming the field; tuning trials are not retried unless asked, and never when the tuning stage chooses the
learning rate. Also: which stages a policy applies to, and the attempt rates."""
from __future__ import annotations

import pytest
import yaml

from core.typed_config import ConfigError
from harness.sweep.schema import RetrySection, parse_sweep
from harness.sweep.trainable import retry_policy

BASE = """
name: t
data: {source: synthetic, scale: tiny, history_len: 8, n_train: 100, n_valid: 50, n_test: 50}
model: {dim: 8}
grid:
  arch: [deepfm]
  seed: [0, 1]
"""
TUNING = {"param": "train.lr", "grid": {"values": [1e-3, 1e-2, 1e-1]}}


def _with(**sections) -> str:
    raw = yaml.safe_load(BASE)
    raw.update(sections)
    return yaml.safe_dump(raw)


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_sweep(text)
    return str(info.value)


def test_no_retry_by_default_and_the_documented_defaults():
    assert parse_sweep(BASE).config.retry is None
    sweep = parse_sweep(_with(retry={}))
    assert sweep.config.retry == RetrySection(when=["diverged", "collapsed"], lr_factor=0.5, max_retries=2,
                                              tuning_trials=False)
    text = BASE + "retry: {when: [diverged], lr_factor: 0.25, max_retries: 3}\n"
    r = parse_sweep(text).config.retry
    assert r == RetrySection(when=["diverged"], lr_factor=0.25, max_retries=3)
    assert [r.lr_of(0.16, k) for k in range(4)] == [0.16, 0.04, 0.01, 0.0025]


@pytest.mark.parametrize("retry, field, words", [
    ({"when": ["diverged"], "max_attempts": 2}, "retry.max_attempts", "valid keys: lr_factor, max_retries"),
    ({"when": ["exploded"]}, "retry.when", "diverged, collapsed, undertrained"),
    ({"when": ["ok"]}, "retry.when", "unknown status 'ok'"),
    ({"when": []}, "retry.when", "empty"),
    ({"when": ["diverged", "diverged"]}, "retry.when", "repeated"),
    ({"when": "diverged"}, "retry.when", "'diverged'"),  # a string is split on commas: one status, valid
    ({"lr_factor": 0}, "retry.lr_factor", "> 0 other than 1"),
    ({"lr_factor": 1}, "retry.lr_factor", "> 0 other than 1"),
    ({"lr_factor": float("nan")}, "retry.lr_factor", "finite"),
    ({"lr_factor": "half"}, "retry.lr_factor", "expected a number"),
    ({"max_retries": 0}, "retry.max_retries", ">= 1"),
    ({"max_retries": 1.5}, "retry.max_retries", "expected an integer"),
    ({"tuning_trials": "maybe"}, "retry.tuning_trials", "true/false"),
    ({"tuning_trials": True}, "retry.tuning_trials", "no `tuning:` stage"),
])
def test_bad_values_name_the_field(retry, field, words):
    if retry == {"when": "diverged"}:  # accepted, as a one-item list
        assert parse_sweep(_with(retry=retry)).config.retry.when == ["diverged"]
        return
    msg = _error(_with(retry=retry))
    assert field in msg and words in msg, msg


def test_a_bare_on_key_is_explained():
    # YAML 1.1 reads `on` as true: the user meant the statuses, and is told the field's name
    msg = _error(BASE + "retry: {on: [diverged], lr_factor: 0.5}\n")
    assert "retry:" in msg and "`when: [" in msg and "on" in msg, msg
    assert _error(BASE + "retry: [diverged]\n").startswith("retry: expected a mapping")


def test_tuning_trials_are_not_retried_unless_asked_and_never_when_tuning_the_rate():
    sweep = parse_sweep(_with(retry={}, tuning=TUNING))
    assert retry_policy(sweep, "grid") is sweep.config.retry
    assert retry_policy(sweep, "tuning") is None and retry_policy(sweep, "search") is None
    msg = _error(_with(retry={"tuning_trials": True}, tuning=TUNING))
    assert "retry.tuning_trials" in msg and "chooses train.lr" in msg
    decay = {**TUNING, "param": "train.weight_decay"}
    sweep = parse_sweep(_with(retry={"tuning_trials": True}, tuning=decay))
    assert retry_policy(sweep, "tuning") is sweep.config.retry
    assert retry_policy(parse_sweep(BASE), "grid") is None
