"""Store wrappers for tests of I/O behaviour: :class:`Wrapping` passes every call to the
store it wraps (subclasses override what they watch), :class:`CountingStore` counts requests
and bytes."""

from zarrx.storage.store import Store


class Wrapping(Store):
    """Passes every call, batch calls included, to ``inner``."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.read_only = inner.read_only

    def get(self, key, byte_range=None):
        return self.inner.get(key, byte_range)

    def get_many(self, keys):
        return self.inner.get_many(keys)

    def get_ranges(self, requests):
        return self.inner.get_ranges(requests)

    def exists(self, key):
        return self.inner.exists(key)

    def set(self, key, value):
        self.inner.set(key, value)

    def set_many(self, items):
        self.inner.set_many(items)

    def delete(self, key):
        self.inner.delete(key)

    def delete_many(self, keys):
        self.inner.delete_many(keys)

    def delete_prefix(self, prefix):
        self.inner.delete_prefix(prefix)

    def list_prefix(self, prefix):
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix):
        return self.inner.list_dir(prefix)


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
