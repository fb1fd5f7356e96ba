"""Store wrappers for tests of I/O behaviour: :class:`Wrapping` passes every call to the
store it wraps (subclasses override what they watch), :class:`CountingStore` counts requests
and bytes."""

from zarrx.storage.store import Store, WrapperStore


class Wrapping(WrapperStore):
    """Passes every call, batch calls included, to ``inner``.

    These wrappers watch the batches a read makes, so they read as a remote store would: in
    batched calls, never chunk by chunk from a thread pool (which a local store's
    ``reads_are_local`` would allow).
    """

    reads_are_local = False


class CountingStore(Wrapping):
    """Wraps a store; ``requests`` lists every read as ``(key, byte_range)``, ``batches`` the batch calls."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.reset()

    def reset(self) -> None:
        self.requests: list[tuple[str, object]] = []
        self.batches = 0
        self.bytes_read = 0
        self.writes: list[str] = []

    def _count(self, key, byte_range, value):
        self.requests.append((key, byte_range))
        self.bytes_read += len(value) if value is not None else 0
        return value

    def get(self, key, byte_range=None):
        return self._count(key, byte_range, self.inner.get(key, byte_range))

    def get_many(self, keys):
        self.batches += 1
        values = self.inner.get_many(keys)
        for key in keys:
            self._count(key, None, values[key])
        return values

    def get_ranges(self, requests):
        self.batches += 1
        values = self.inner.get_ranges(requests)
        for (key, byte_range), value in zip(requests, values):
            self._count(key, byte_range, value)
        return values

    def set(self, key, value):
        self.writes.append(key)
        self.inner.set(key, value)

    def set_many(self, items):
        self.writes.extend(items)
        self.inner.set_many(items)

    def exists(self, key):
        return self.get(key) is not None  # counted as the read it is

    def chunk_requests(self):
        return [(key, byte_range) for key, byte_range in self.requests if not key.endswith("zarr.json")]
