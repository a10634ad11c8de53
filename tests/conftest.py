"""Shared pytest fixtures: the internal MovieLens-100k copy (outside the repository) and deterministic,
small-thread torch settings."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ML100K = SHARED / "data" / "ml-100k"


@pytest.fixture
def ml100k_dir() -> Path:
    """MovieLens-100k from the internal data folder beside the repository (never committed); skips where absent."""
    if not (ML100K / "u.data").exists():
        pytest.skip(f"MovieLens-100k not found at {ML100K}")
    return ML100K


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for modules of tiny models on a shared 2-core machine.

    Use with `pytestmark = pytest.mark.usefixtures("one_thread")`.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
