"""The entry cache of small objects: bounded in bytes, least recently used dropped first,
large entries never kept, nothing kept when it is off."""

from __future__ import annotations

from blobstore.objects.read_object_op import ENTRY_CACHE_OVERHEAD_BYTES, EntryCache


def test_least_recently_used_entries_go_first_once_the_bytes_are_full() -> None:
    cache = EntryCache(bytes_max=3 * (1000 + ENTRY_CACHE_OVERHEAD_BYTES), payload_bytes_max=1000)
    for entry_id in range(3):
        cache.put(7, entry_id, bytes([entry_id]) * 1000)
    assert cache.get(7, 0) == b"\x00" * 1000  # 0 is now the most recently used
    cache.put(7, 3, b"\x03" * 1000)
    assert cache.get(7, 1) is None  # the least recently used went
    assert cache.get(7, 0) == b"\x00" * 1000
    assert cache.get(7, 2) == b"\x02" * 1000
    assert cache.get(7, 3) == b"\x03" * 1000
    assert cache.get(8, 0) is None  # another ledger's entry 0 is another entry


def test_entries_larger_than_the_payload_bound_are_not_kept() -> None:
    cache = EntryCache(bytes_max=1 << 20, payload_bytes_max=1000)
    cache.put(1, 0, b"x" * 1001)
    cache.put(1, 1, b"y" * 1000)
    assert cache.get(1, 0) is None
    assert cache.get(1, 1) == b"y" * 1000


def test_an_entry_cache_of_zero_bytes_keeps_nothing() -> None:
    cache = EntryCache(bytes_max=0, payload_bytes_max=1000)
    cache.put(1, 0, b"z")
    cache.put(1, 1, b"")
    assert cache.get(1, 0) is None
    assert cache.get(1, 1) is None


def test_clear_drops_every_entry() -> None:
    cache = EntryCache(bytes_max=1 << 20, payload_bytes_max=1000)
    cache.put(1, 0, b"a")
    cache.clear()
    assert cache.get(1, 0) is None


def test_tiny_entries_count_their_bookkeeping_against_the_bound() -> None:
    """A million one-byte objects must not hold hundreds of MiB under a 1 MiB bound."""
    cache = EntryCache(bytes_max=1 << 20, payload_bytes_max=1000)
    for entry_id in range(100_000):
        cache.put(1, entry_id, b"x")
    kept = sum(cache.get(1, entry_id) is not None for entry_id in range(100_000))
    assert kept == (1 << 20) // (1 + ENTRY_CACHE_OVERHEAD_BYTES)
