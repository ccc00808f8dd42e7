"""A YAML loader that remembers lines, so every manifest error can name the line it is about.

Mappings load as :class:`Map` and sequences as :class:`Seq`; duplicate keys are recorded, not
raised, because only the validator knows the key path to report.
"""

from __future__ import annotations

from typing import Any

import yaml


class Map(dict):
    """A YAML mapping that remembers the line of each key and value.

    Duplicate keys are recorded instead of raised: the validator knows the
    dotted key path, the loader does not.
    """

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[Any, int] = {}
        self.value_lines: dict[Any, int] = {}
        self.duplicates: list[tuple[Any, int, int]] = []  # (key, line, first line)


class Seq(list):
    """A YAML sequence that remembers the line of each item."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


class LineLoader(yaml.SafeLoader):
    """SafeLoader that builds Map/Seq so errors can point at lines."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


def node_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _construct_key(loader: LineLoader, node: yaml.MappingNode, key_node: yaml.Node) -> Any:
    key = loader.construct_object(key_node, deep=True)
    try:
        hash(key)
    except TypeError:
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
        ) from None
    return key


def _record_duplicates(loader: LineLoader, node: yaml.MappingNode, out: Map) -> None:
    """Find keys written twice in this mapping (merge keys ``<<`` excluded)."""
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = _construct_key(loader, node, key_node)
        if key in first:
            out.duplicates.append((key, node_line(key_node), first[key]))
        else:
            first[key] = node_line(key_node)


def _construct_map(loader: LineLoader, node: yaml.MappingNode):
    out = Map(node_line(node))
    yield out
    _record_duplicates(loader, node, out)
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = _construct_key(loader, node, key_node)
        out[key] = loader.construct_object(value_node, deep=False)
        out.key_lines[key] = node_line(key_node)
        out.value_lines[key] = node_line(value_node)


def _construct_seq(loader: LineLoader, node: yaml.SequenceNode):
    out = Seq(node_line(node))
    yield out
    for child in node.value:
        out.append(loader.construct_object(child, deep=False))
        out.item_lines.append(node_line(child))


LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


#: Most YAML nodes a manifest may expand to, aliases counted once per use: an alias bomb (anchors
#: nested a few levels) is refused before anything iterates over it.
MAX_YAML_NODES = 200_000


def oversized_node(node: yaml.Node, limit: int = MAX_YAML_NODES) -> yaml.Node | None:
    """The innermost node that stands for more than ``limit`` nodes with every alias expanded (a
    node reached twice counts twice), or a node that contains itself: where an alias bomb goes
    off, for its line. None when the document stays within. Each distinct node is sized once."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, children_done = stack.pop()
        if id(current) in sizes:
            continue
        children = _children(current)
        if children_done:
            open_nodes.discard(id(current))
            size = 1 + sum(sizes[id(c)] for c in children)
            if size > limit:
                return current  # its children all fit: the innermost node too big
            sizes[id(current)] = size
            continue
        if any(id(c) in open_nodes or c is current for c in children):
            return current  # a node that contains itself expands without end
        open_nodes.add(id(current))
        stack.append((current, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
