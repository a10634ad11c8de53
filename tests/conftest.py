"""Shared pytest fixtures: the internal MovieLens-100k copy (outside the repository) and deterministic,
small-thread torch settings."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _ml100k_dir() -> Path:
    """$RECSCALE_ML100K, else shared/data/ml-100k beside the repository, or beside the main checkout
    when this is a git worktree elsewhere (found through git's common directory)."""
    if os.environ.get("RECSCALE_ML100K"):
        return Path(os.environ["RECSCALE_ML100K"])
    candidates = [REPO.parent / "shared" / "data" / "ml-100k"]
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if common:
            candidates.append(Path(common).parent.parent / "shared" / "data" / "ml-100k")
    except (OSError, subprocess.SubprocessError):
        pass
    return next((c for c in candidates if (c / "u.data").exists()), candidates[0])


ML100K = _ml100k_dir()


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory):
    """Every test keeps its Ray session records (harness/sweep/ray_sessions.py) in its own temporary folder,
    never the user's cache."""
    import os

    before = os.environ.get("RECSCALE_CACHE_DIR")
    os.environ["RECSCALE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("RECSCALE_CACHE_DIR", None)
    else:
        os.environ["RECSCALE_CACHE_DIR"] = before


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
