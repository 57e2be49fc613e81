"""Fixtures shared by the Python tests."""

from __future__ import annotations

import pytest

import dpl.world

#: the variables dpl reads a rank and world size from
RANK_VARS = ("DPL_RANK", "DPL_WORLD_SIZE", "RANK", "WORLD_SIZE")


@pytest.fixture
def no_rank_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No rank variables, and no process world left by an earlier test
    (dpl.world.current() would return that one first); the monkeypatch,
    to set variables with, undone after the test."""
    for v in RANK_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(dpl.world, "_process_world", None)
    return monkeypatch
