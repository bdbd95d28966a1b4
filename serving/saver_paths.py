"""The saver's own checkpoint paths, for the graph check (graph_check.py), and the walk over a
GraphDef's nodes and function library both use.

A checkpoint op passes only on the saver's filename itself (what the loader feeds with the
model's `variables/variables`), or for a save, that name with the saver's temporary suffix and
its shards. Inside a function the filename is an argument that every call fills with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CALLS = ("PartitionedCall", "StatefulPartitionedCall")
# What the saver appends to its filename for a save's shards (TF1: _temp_<uuid>/part).
_SAVE_SUFFIX = re.compile(rb"^(\.part|_temp[A-Za-z0-9_]*/part)$")


def node_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":", 1)[0]


def data_inputs(node: Any) -> list[str]:
    return [i for i in node.input if not i.startswith("^")]


def attr_values(attrs: Any) -> Iterable[Any]:
    """Every AttrValue of a node, those nested in its function attrs included (an attr of a
    function body can be a placeholder that the caller's function attr fills)."""
    for value in attrs.values():
        yield value
        if value.HasField("func"):
            yield from attr_values(value.func.attr)
        if value.HasField("list"):
            for func in value.list.func:
                yield from attr_values(func.attr)


def functions_called(node: Any) -> Iterable[str]:
    for value in attr_values(node.attr):
        if value.HasField("func"):
            yield value.func.name
        if value.HasField("list"):
            yield from (func.name for func in value.list.func)


def ancestors(nodes: dict[str, Any], targets: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    stack = [node_name(t) for t in targets if t]
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        stack.extend(node_name(i) for i in nodes[name].input)
    return seen


def reachable_functions(functions: dict[str, Any], roots: Iterable[Any]) -> set[str]:
    seen: set[str] = set()
    stack = [name for node in roots for name in functions_called(node)]
    while stack:
        name = stack.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        stack.extend(n for node in functions[name].node_def for n in functions_called(node))
    return seen

@dataclass
class Scope:
    """The graph, or one function: its nodes by name and which names hold the saver's
    filename (the graph's filename tensor; a function's arguments every caller fills so)."""
    nodes: dict[str, Any]
    prefixes: set[str]

    def node(self, ref: str) -> Any:
        return self.nodes.get(node_name(ref))

    def is_prefix(self, ref: str) -> bool:
        if node_name(ref) in self.prefixes:
            return True
        node = self.node(ref)
        return node is not None and node.op in ("Identity", "Snapshot") and bool(
            node.input) and self.is_prefix(node.input[0])

    def _is_suffix(self, ref: str) -> bool:
        node = self.node(ref)
        if node is None:
            return False
        if node.op in ("Select", "SelectV2") and len(data_inputs(node)) == 3:
            return all(self._is_suffix(i) for i in data_inputs(node)[1:])
        values = node.attr["value"].tensor.string_val if node.op == "Const" else []
        return len(values) == 1 and bool(_SAVE_SUFFIX.match(values[0]))

    def is_save_path(self, ref: str) -> bool:
        """The filename, its temporary name, or a shard of either."""
        node = self.node(ref)
        if self.is_prefix(ref):
            return True
        if node is None:
            return False
        inputs = data_inputs(node)
        if node.op == "ShardedFilename" and inputs:
            return self.is_save_path(inputs[0])
        if node.op == "Pack":
            return bool(inputs) and all(self.is_save_path(i) for i in inputs)
        return (node.op == "StringJoin" and not node.attr["separator"].s and len(inputs) == 2
                and self.is_prefix(inputs[0]) and self._is_suffix(inputs[1]))


def checkpoint_path_ok(scope: Scope, node: Any) -> bool:
    inputs = data_inputs(node)
    if not inputs:
        return False
    if node.op in ("Restore", "RestoreV2", "RestoreSlice"):
        return scope.is_prefix(inputs[0])
    if node.op == "MergeV2Checkpoints":
        return len(inputs) == 2 and scope.is_save_path(inputs[0]) and scope.is_prefix(inputs[1])
    return scope.is_save_path(inputs[0])


def prefix_arguments(*, graph: Scope, functions: dict[str, Any]) -> dict[str, set[str]]:
    """For each function, the arguments that hold the saver's filename at every call (a
    function that anything but a call's own `f` names holds none)."""
    bodies = {name: {n.name: n for n in f.node_def} for name, f in functions.items()}
    sites: dict[str, list[tuple[str | None, Any]]] = {}
    for caller, nodes in [(None, graph.nodes), *bodies.items()]:
        for node in nodes.values():
            for name in functions_called(node):
                sites.setdefault(name, []).append((caller, node))
    bound = {name: {a.name for a in f.signature.input_arg} for name, f in functions.items()}
    changed = True
    while changed:  # shrinks to the greatest fixed point: every call must pass the filename
        changed = False
        for name, function in functions.items():
            args = [a.name for a in function.signature.input_arg]
            keep = set(bound[name])
            for caller, node in sites.get(name, []):
                if node.op not in CALLS or node.attr["f"].func.name != name:
                    keep.clear()
                    break
                scope = graph if caller is None else Scope(bodies[caller], bound[caller])
                keep &= {arg for arg, ref in zip(args, data_inputs(node), strict=False)
                         if scope.is_prefix(ref)}
            if keep != bound[name]:
                bound[name], changed = keep, True
    return bound
