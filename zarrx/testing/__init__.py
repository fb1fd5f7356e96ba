"""Helpers for testing code that uses zarrx: :class:`FaultyStore` fails chosen store operations
on purpose (:mod:`zarrx.testing.faults`)."""

from zarrx.testing.faults import FailOnce, FaultRule, FaultyStore

__all__ = ["FailOnce", "FaultRule", "FaultyStore"]
