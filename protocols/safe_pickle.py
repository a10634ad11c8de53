"""A restricted unpickler for RecFlow's downloaded `.pkl` files (docs/data.md): `load_int_array_dict` resolves only
`ALLOWED_GLOBALS`, refusing any other global before it is called, and the result must be a dict from integers to
integer numpy arrays.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from .errors import DataValidationError

#: (module, name) pairs the stream may reference: the numpy globals that rebuild integer arrays and scalars, in
#: numpy 1 (`numpy.core`) and numpy 2 (`numpy._core`), and `_codecs.encode`, used by protocol-2 array pickles.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    [(prefix + ".multiarray", "_reconstruct") for prefix in ("numpy.core", "numpy._core")]
    + [(prefix + ".multiarray", "scalar") for prefix in ("numpy.core", "numpy._core")]
    + [(prefix + ".numeric", "_frombuffer") for prefix in ("numpy.core", "numpy._core")]
    + [("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")]
)


class UnsafePickleError(DataValidationError):
    """The pickle references something other than dicts, ints and numpy arrays."""


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, path: str):
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafePickleError(self._path, "(pickle)", "refusing to load a global other than numpy array parts",
                                    value=f"{module}.{name}")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        raise UnsafePickleError(self._path, "(pickle)", "persistent ids are not allowed", value=str(pid))


def loads_int_array_dict(data: bytes, path: str = "<bytes>") -> dict[int, np.ndarray]:
    """Unpickle `data` with the restricted unpickler and check it is {int: integer ndarray}."""
    try:
        obj = _RestrictedUnpickler(io.BytesIO(data), path).load()
    except UnsafePickleError:
        raise
    except Exception as e:  # malformed streams raise many kinds of errors
        raise DataValidationError(path, "(pickle)", f"unreadable pickle: {type(e).__name__}: {e}") from None
    if not isinstance(obj, dict):
        raise UnsafePickleError(path, "(pickle)", "top-level object must be a dict", value=type(obj).__name__)
    for key, value in obj.items():
        if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
            raise UnsafePickleError(path, "(key)", "keys must be integers", value=repr(key))
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.integer):
            shown = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise UnsafePickleError(path, "(value)", f"value of key {int(key)} must be an integer numpy array",
                                    value=str(shown))
    return {int(k): v for k, v in obj.items()}


def load_int_array_dict(path: Path | str) -> dict[int, np.ndarray]:
    """Read a `.pkl` file through `loads_int_array_dict`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataValidationError(str(path), "(file)", f"unreadable: {e}") from None
    return loads_int_array_dict(data, str(path))
