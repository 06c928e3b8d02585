"""mmc_core.common.memory: freed memory kept for reuse during large fits (glibc's mallopt), restored afterwards."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.common import memory
from mmc_core.common.synthetic import demo_distribution


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


ENTER = [("mallopt", memory.M_MMAP_MAX, 0), ("mallopt", memory.M_TRIM_THRESHOLD, memory.KEEP_TRIM_THRESHOLD)]
LEAVE = [
    ("mallopt", memory.M_MMAP_MAX, memory.DEFAULT_MMAP_MAX),
    ("mallopt", memory.M_TRIM_THRESHOLD, memory.DEFAULT_TRIM_THRESHOLD),
    ("malloc_trim", 0),
]


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLibc()
    monkeypatch.setattr(memory, "_libc", lib)
    for v in memory._USER_TUNED:
        monkeypatch.delenv(v, raising=False)
    return lib


def test_large_tables_keep_freed_memory_and_restore_the_defaults(fake):
    with memory.reuse_freed_memory(memory.LARGE_ROWS):
        assert fake.calls == ENTER
        with memory.reuse_freed_memory(10 * memory.LARGE_ROWS):  # nested: nothing new, nothing restored yet
            pass
        assert fake.calls == ENTER
    assert fake.calls == ENTER + LEAVE
    with pytest.raises(ValueError), memory.reuse_freed_memory(memory.LARGE_ROWS):  # restored on an exception too
        raise ValueError
    assert fake.calls == 2 * (ENTER + LEAVE) and memory._depth == 0


@pytest.mark.parametrize("env", [None, "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES", "MMC_KEEP_MALLOC"])
def test_small_tables_and_user_tuned_allocators_are_left_alone(fake, monkeypatch, env):
    if env is None:
        rows = memory.LARGE_ROWS - 1
    else:
        rows = memory.LARGE_ROWS
        monkeypatch.setenv(env, "1")
    with memory.reuse_freed_memory(rows):
        pass
    with memory.reuse_freed_memory(None):
        pass
    assert fake.calls == []


def test_no_glibc_is_a_no_op(monkeypatch):
    monkeypatch.setattr(memory, "_libc", False)
    with memory.reuse_freed_memory(10 * memory.LARGE_ROWS):
        pass
    assert memory._depth == 0


def test_concurrent_fits_restore_when_the_last_one_leaves(fake):
    inside, release = threading.Barrier(2), threading.Event()

    def work():
        with memory.reuse_freed_memory(memory.LARGE_ROWS):
            inside.wait(timeout=60)
            release.wait(timeout=60)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    while memory._depth < 2:  # both inside
        threading.Event().wait(0.01)
    assert fake.calls == ENTER
    release.set()
    for t in threads:
        t.join(timeout=60)
    assert fake.calls == ENTER + LEAVE


def _model_json(est) -> dict:
    """The model's JSON without its wall-clock fields."""
    d = json.loads(est.model_.to_json())
    info = d.get("info", {})
    info.pop("seconds", None)
    for row in info.get("history", []):
        row.pop("seconds", None)
    return d


def test_fit_and_predict_run_inside_and_give_identical_models(fake, monkeypatch):
    """The fit and the prediction replay enter the context once each (counted through a stand-in libc); with
    the real allocator switched on (a tiny LARGE_ROWS) the fitted model is the same as without it."""
    dist = demo_distribution()
    table, y = dist.sample(3000, np.random.default_rng(5))
    groups = GroupSet.from_columns(table, ["sex", "race", "age"], 2)
    monkeypatch.setattr(memory, "LARGE_ROWS", 1000)
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(table, y, groups)
    assert fake.calls == ENTER + LEAVE and memory._depth == 0  # once: the fit's own predictions are nested
    n_fit = len(fake.calls)
    est.model_.predict(table)
    assert len(fake.calls) == n_fit + len(ENTER + LEAVE)
    # the real glibc (when present): identical results with and without
    monkeypatch.setattr(memory, "_libc", None)
    with_real = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(table, y, groups)
    monkeypatch.setenv("MMC_KEEP_MALLOC", "1")
    without = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(table, y, groups)
    assert _model_json(with_real) == _model_json(without) == _model_json(est)
