"""heap.release_free_memory: the C heap's free pages go back to the OS (glibc, as on the
images the triggerer runs on)."""

from __future__ import annotations

import psutil

from airflow_volcano_wandb.wait import heap


def test_freed_heap_memory_pinned_by_a_live_block_is_given_back():
    rss = psutil.Process().memory_info
    # 64 KiB blocks come from the heap (below malloc's mmap threshold); the last one, kept,
    # pins the heap's top, so free() alone cannot shrink it: what a LIST's pages leave.
    blocks = [bytearray(64 * 1024) for _ in range(1600)]
    kept = blocks.pop()
    before = rss().rss
    del blocks
    freed = rss().rss
    assert heap.release_free_memory()
    after = rss().rss
    assert before - freed < 50 * 2**20  # free() kept most of the 100 MiB
    assert freed - after > 50 * 2**20  # given back now
    assert len(kept) == 64 * 1024
