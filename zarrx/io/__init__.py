"""Plan, then execute: every read and write of array data.

:mod:`~zarrx.io.selection` turns a selection into chunk projections, :mod:`~zarrx.io.plan`
groups them by stored object (chunk or shard) and byte range, and :mod:`~zarrx.io.execute`
(reads) and :mod:`~zarrx.io.write` (writes) run the plan against a store, decoding through
:mod:`~zarrx.io.decode`. All of them work on an :class:`~zarrx.io.handle.ArrayHandle`, which
is also what dask tasks hold. ``explain()`` and ``zarrx verify`` run these same plans.
"""
