"""The restricted unpickler loads RecFlow-style dicts and refuses pickles that would run code."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from protocols.errors import DataValidationError
from protocols.safe_pickle import UnsafePickleError, load_int_array_dict, loads_int_array_dict


class _RunsShell:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').getcwd()",))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_loads_dict_of_int_arrays(protocol, tmp_path):
    rng = np.random.default_rng(0)
    data = {7: rng.integers(0, 100, (50, 10)), np.int64(9): np.zeros((50, 10), np.int32),
            11: np.arange(20).reshape(4, 5)[:, ::2]}
    path = tmp_path / "a.pkl"
    path.write_bytes(pickle.dumps(data, protocol=protocol))
    loaded = load_int_array_dict(path)
    assert sorted(loaded) == [7, 9, 11]
    for k, v in data.items():
        np.testing.assert_array_equal(loaded[int(k)], v)


@pytest.mark.fault
def test_refuses_pickle_that_runs_a_shell_command(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({1: _RunsShell(str(marker))})
    with pytest.raises(UnsafePickleError) as err:
        loads_int_array_dict(payload, "evil.pkl")
    assert not marker.exists()
    assert "evil.pkl" in str(err.value) and "system" in str(err.value)
    # the same payload really does run code under plain pickle (so the test above can fail)
    pickle.loads(payload)
    assert marker.exists()


@pytest.mark.fault
def test_refuses_builtins_eval():
    with pytest.raises(UnsafePickleError, match="eval"):
        loads_int_array_dict(pickle.dumps(_CallsEval()))


@pytest.mark.fault
@pytest.mark.parametrize(
    "obj, message",
    [
        ([np.zeros((2, 2), np.int64)], "must be a dict"),
        ({"a": np.zeros((2, 2), np.int64)}, "keys must be integers"),
        ({1: np.zeros((2, 2), np.float64)}, "integer numpy array"),
        ({1: np.array([1, 2], dtype=object)}, "integer numpy array"),
        ({1: 5}, "integer numpy array"),
    ],
)
def test_refuses_other_contents(obj, message):
    with pytest.raises(UnsafePickleError, match=message):
        loads_int_array_dict(pickle.dumps(obj))


@pytest.mark.fault
def test_garbage_is_a_validation_error(tmp_path):
    path = tmp_path / "bad.pkl"
    path.write_bytes(b"\x80\x04not a pickle at all")
    with pytest.raises(DataValidationError, match="bad.pkl"):
        load_int_array_dict(path)
