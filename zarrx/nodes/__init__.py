"""Arrays, groups and the functions that open and create them (the user-facing core).

:mod:`~zarrx.nodes.api` has :func:`zarrx.open`, :func:`zarrx.create_array` and their kin;
:class:`~zarrx.nodes.array.Array` and :class:`~zarrx.nodes.group.Group` are the nodes;
:mod:`~zarrx.nodes.hierarchy` finds node documents in every format, :mod:`~zarrx.nodes.create`
writes new ones, :mod:`~zarrx.nodes.metadata_builder` turns ``create_array``'s keywords into
metadata. Conveniences that belong to higher layers come through :mod:`~zarrx.nodes.conveniences`.
"""
