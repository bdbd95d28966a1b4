"""A SavedModel is a program (TensorFlow's SECURITY.md): before one is served, its graphs are
read, and every op must be one that inference graphs are made of (allowed_ops.py: math, nn,
arrays, control flow, variables); anything else (files, Python, datasets, summaries, remote
calls) is refused by name.

    python -m serving.graph_check /models/name/3 [--allow ReadFile,...] [--serving-version 2.20.0]
    # exit 0: nothing found; 3: findings (JSON on stdout); 2: not a readable SavedModel;
    # 4: ops that TF Serving release lacks (serving_ops.py)

Every node of every meta graph and of every function in its library is looked at, not only what
the signatures reach: TF Serving also runs init ops, and a function can be called by name (the
few ops of UNREACHABLE_ONLY pass only in a function no node of the graph reaches). A function
attr must name a function of the library (a registered op's name would run that op).
A string constant that parses as a GraphDef is refused: ops such as DatasetFromGraph run one,
out of sight of any node check.

Checkpoint ops (SaveV2, RestoreV2, ...) are the saver's own business: they pass only in the
nodes the SaverDef's save and restore targets depend on and the functions those call, no
signature may feed or fetch those nodes (a signature that fed the saver's filename could write
anywhere), and their path must be the saver's filename itself (what the server feeds with the
model's `variables/variables`), or for a save, that name with the saver's temporary suffix: a
RestoreV2 of a constant path would read another model's (or tenant's) checkpoint at load.
Run in a process of its own: it imports TensorFlow's protos, and the file is hostile input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serving.allowed_ops import ALLOWED_OPS, CHECKPOINT_OPS, UNREACHABLE_ONLY
from serving.saver_paths import (
    Scope,
    ancestors,
    attr_values,
    checkpoint_path_ok,
    functions_called,
    node_name,
    prefix_arguments,
    reachable_functions,
)
from serving.serving_ops import serving_ops

EXIT_FINDINGS, EXIT_UNREADABLE, EXIT_UNSERVABLE = 3, 2, 4
HIDDEN_GRAPH = "a GraphDef in a string constant"
ASSET_OUTSIDE = "an asset file outside assets/"
HANDLE_CONSTANT = "a resource or variant constant"
# How op types are spelled: what tells a hidden graph from bytes that merely parse (protobuf
# reads most messages as some GraphDef, the saver's own object graph included).
_OP_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Finding:
    op: str
    node: str
    where: str  # "graph", "signature", "assets" or the function's name


class UnsafeGraph(ValueError):
    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        super().__init__(findings_describe(findings))


def findings_describe(findings: list[Finding]) -> str:
    ops = sorted({f.op for f in findings})
    return f"the SavedModel uses {', '.join(ops)}, which {'is' if len(ops) == 1 else 'are'} " \
        "not allowed"


def _attr_tensors(node: Any) -> list[Any]:
    values = list(attr_values(node.attr))
    tensors = [value.tensor for value in values if value.HasField("tensor")]
    return tensors + [t for value in values if value.HasField("list") for t in value.list.tensor]


def _handle_constant(node: Any) -> bool:
    """A constant resource handle (it would name any resource of the session: a table, an
    iterator) or variant (a dataset, a list) made up in the file."""
    from tensorflow.core.framework import types_pb2

    return any(t.dtype in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT)
               for t in _attr_tensors(node))


def _hidden_graph(node: Any) -> bool:
    """A string tensor in any attr that parses as a GraphDef with a node of some op type
    (DatasetFromGraph and its kind run one)."""
    from tensorflow.core.framework import graph_pb2, types_pb2

    for tensor in _attr_tensors(node):
        if tensor.dtype != types_pb2.DT_STRING:
            continue
        for blob in (*tensor.string_val, tensor.tensor_content):
            graph = graph_pb2.GraphDef()
            try:
                graph.ParseFromString(blob)
            except Exception:  # noqa: S112 - not a GraphDef is the ordinary case
                continue
            if any(_OP_NAME.match(n.op) for n in graph.node):
                return True
    return False


def _node_findings(node: Any, *, where: str, functions: dict[str, Any], saver: Scope | None,
                   allowed: frozenset[str], reachable: bool = True) -> list[Finding]:
    found = []
    if _hidden_graph(node):
        found.append(Finding(op=HIDDEN_GRAPH, node=node.name, where=where))
    if _handle_constant(node):
        found.append(Finding(op=HANDLE_CONSTANT, node=node.name, where=where))
    found += [Finding(op=f"{name} (called as a function)", node=node.name, where=where)
              for name in functions_called(node) if name and name not in functions]
    if node.op in allowed:
        return found
    if node.op in CHECKPOINT_OPS:
        if saver is None or not checkpoint_path_ok(saver, node):
            found.append(Finding(op=node.op, node=node.name, where=where))
    elif node.op in ("Print", "PrintV2"):
        stream = node.attr.get("output_stream")
        # tf.print can append to any file; a placeholder stream is the caller's to choose.
        if stream is not None and (stream.placeholder or stream.s.startswith(b"file")):
            found.append(Finding(op=f"{node.op} to a file", node=node.name, where=where))
    elif node.op not in ALLOWED_OPS and (reachable or node.op not in UNREACHABLE_ONLY):
        found.append(Finding(op=node.op, node=node.name, where=where))
    return found


def meta_graph_findings(meta_graph: Any, *, allowed: frozenset[str]) -> list[Finding]:
    graph = meta_graph.graph_def
    nodes = {node.name: node for node in graph.node}
    functions = {f.signature.name: f for f in graph.library.function}
    saver = meta_graph.saver_def
    filename = node_name(saver.filename_tensor_name)
    saver_nodes = ancestors(nodes, (saver.save_tensor_name, saver.restore_op_name))
    saver_functions = reachable_functions(functions, (nodes[n] for n in saver_nodes))
    # What a request can run: every signature's tensors and all they depend on.
    tensors = [t.name for sig in meta_graph.signature_def.values()
               for t in (*sig.inputs.values(), *sig.outputs.values())]
    served_nodes = ancestors(nodes, tensors)
    served_functions = reachable_functions(functions, (nodes[n] for n in served_nodes))
    in_graph = Scope(nodes, {filename} if filename else set())
    arguments = prefix_arguments(graph=in_graph, functions=functions)
    findings = []
    for node in graph.node:
        saving = node.name in saver_nodes and node.name not in served_nodes
        findings += _node_findings(node, where="graph", functions=functions, allowed=allowed,
                                   saver=in_graph if saving else None)
    # What any node of the graph calls, however indirectly: what a session can run.
    live_functions = reachable_functions(functions, graph.node)
    for name, function in functions.items():
        saving = name in saver_functions and name not in served_functions
        scope = Scope({n.name: n for n in function.node_def}, arguments[name])
        for node in function.node_def:
            findings += _node_findings(node, where=name, functions=functions, allowed=allowed,
                                       saver=scope if saving else None,
                                       reachable=name in live_functions)
    findings += [Finding(op="saver filename", node=name, where="signature")
                 for name in (node_name(t) for t in tensors) if filename and name == filename]
    # The loader feeds an asset's tensor with assets/<filename>: a file op an operator allowed
    # (a vocabulary table's) must not be pointed outside the model that way.
    findings += [Finding(op=ASSET_OUTSIDE, node=asset.filename, where="assets")
                 for asset in meta_graph.asset_file_def if not _plain_relative(asset.filename)]
    return findings


def _plain_relative(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and "\\" not in path and not any(
        part in ("", ".", "..") for part in parts)


def _saved_model_read(*, path: Path) -> Any:
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    binary, text = path / "saved_model.pb", path / "saved_model.pbtxt"
    saved_model = saved_model_pb2.SavedModel()
    try:
        if binary.is_file() or not text.is_file():
            saved_model.ParseFromString(binary.read_bytes())
        else:
            text_format.Parse(text.read_text(), saved_model)
    except OSError:
        raise
    except Exception as error:  # protobuf's DecodeError/ParseError, or a message too deep
        raise ValueError(f"not a readable SavedModel: {error}") from error
    return saved_model


def saved_model_check(*, path: Path, allowed: frozenset[str] = frozenset(),
                      served_by: frozenset[str] | None = None) -> dict[str, Any]:
    """The serving signatures (see `signatures_describe`); raises UnsafeGraph with every
    finding, Unservable with the ops `served_by` (a TF Serving release's ops) lacks, and
    OSError/ValueError for what is no SavedModel."""
    saved_model = _saved_model_read(path=path)
    findings = [f for meta_graph in saved_model.meta_graphs
                for f in meta_graph_findings(meta_graph, allowed=allowed)]
    if findings:
        raise UnsafeGraph(findings)
    if served_by is not None and (lacking := _saved_model_ops(saved_model) - served_by):
        raise Unservable(sorted(lacking))
    serving = [m for m in saved_model.meta_graphs if "serve" in m.meta_info_def.tags]
    return signatures_describe(serving[0]) if serving else {}


class Unservable(ValueError):
    def __init__(self, ops: list[str]) -> None:
        self.ops = ops
        super().__init__(f"the model server's release lacks {', '.join(ops)}")


def _saved_model_ops(saved_model: Any) -> set[str]:
    """Every op type of every graph and function: what a server must have to load it,
    reached or not."""
    return {node.op for meta_graph in saved_model.meta_graphs
            for nodes in (meta_graph.graph_def.node,
                          *(f.node_def for f in meta_graph.graph_def.library.function))
            for node in nodes}


# DataType enum names TensorFlow spells otherwise in Python (DT_FLOAT is tf.float32).
_DTYPE_NAMES = {"float": "float32", "double": "float64", "half": "float16"}


def signatures_describe(meta_graph: Any) -> dict[str, Any]:
    """{signature: {"inputs"|"outputs": {key: {"dtype": "float32", "shape": [-1, 8]}}}}, what a
    client needs to call it (shape None: any rank)."""
    from tensorflow.core.framework import types_pb2

    def tensor(info: Any) -> dict[str, Any]:
        name = types_pb2.DataType.Name(info.dtype).removeprefix("DT_").lower()
        shape = info.tensor_shape
        return {"dtype": _DTYPE_NAMES.get(name, name),
                "shape": None if shape.unknown_rank else [int(d.size) for d in shape.dim]}

    return {
        key: {"inputs": {k: tensor(v) for k, v in sorted(sig.inputs.items())},
              "outputs": {k: tensor(v) for k, v in sorted(sig.outputs.items())}}
        for key, sig in sorted(meta_graph.signature_def.items())
        if not key.startswith("__")  # __saved_model_init_op is no signature a client calls
    }


def _protos_only() -> None:
    """This process needs TensorFlow's generated message classes, not TensorFlow: a package
    stub on TensorFlow's path loads them without its __init__ (5 s and the native runtime).
    Only ever in this command's own process, which never imports TensorFlow proper."""
    if "tensorflow" in sys.modules:
        return
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.submodule_search_locations is None:
        return
    stub = types.ModuleType("tensorflow")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["tensorflow"] = stub


def main(argv: list[str] | None = None) -> int:
    _protos_only()
    parser = argparse.ArgumentParser(prog="python -m serving.graph_check")
    parser.add_argument("path", type=Path)
    parser.add_argument("--allow", default="", help="ops to accept anyway, comma-separated")
    parser.add_argument("--serving-version", default="",
                        help="the TF Serving release that will serve it: every op must be its")
    args = parser.parse_args(argv)
    allowed = frozenset(op.strip() for op in args.allow.split(",") if op.strip())
    served_by = serving_ops(version=args.serving_version) if args.serving_version else None
    try:
        signatures = saved_model_check(path=args.path, allowed=allowed, served_by=served_by)
    except UnsafeGraph as unsafe:
        print(json.dumps({"findings": [asdict(f) for f in unsafe.findings[:100]]}))
        return EXIT_FINDINGS
    except Unservable as unservable:
        print(json.dumps({"unserved": unservable.ops, "serving_version": args.serving_version}))
        return EXIT_UNSERVABLE
    except (OSError, ValueError) as error:
        print(json.dumps({"error": str(error)}))
        return EXIT_UNREADABLE
    print(json.dumps({"signatures": signatures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
