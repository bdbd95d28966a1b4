"""A SavedModel is a program (TensorFlow's SECURITY.md): before one is served, its graphs are
read for operations that touch files, run Python or reach beyond the model.

    python -m serving.graph_check /models/name/3 [--allow ReadFile,...]
    # exit 0: nothing found; 3: findings (JSON on stdout); 2: not a readable SavedModel

Every node of every meta graph and of every function in its library is looked at, not only what
the signatures reach: TF Serving also runs init ops, and a function can be called by name.
Checkpoint ops (SaveV2, RestoreV2, ...) are the saver's own business: they pass only in the
nodes the SaverDef's save and restore targets depend on and the functions those call, and no
signature may feed or fetch those nodes (a signature that fed the saver's filename could write
anywhere). Run in a process of its own: it imports TensorFlow, and the file is hostile input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import types
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Read or write files, list directories, map files into memory, run Python, or write
# summaries/debug dumps to a path of the graph's choosing.
FILE_OPS = frozenset({
    "ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst",
    "PyFunc", "PyFuncStateless", "EagerPyFunc",
    "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2",
    "FixedLengthRecordReader", "FixedLengthRecordReaderV2", "TFRecordReader",
    "TFRecordReaderV2", "IdentityReader", "IdentityReaderV2", "LMDBReader",
    "ReaderRead", "ReaderReadV2", "ReaderReadUpTo", "ReaderReadUpToV2",
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "MatchingFilesDataset", "ExperimentalMatchingFilesDataset",
    "LMDBDataset", "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset",
    "SaveDataset", "SaveDatasetV2", "LoadDataset", "DatasetToTFRecord",
    "ExperimentalDatasetToTFRecord", "SnapshotDataset", "SnapshotDatasetV2",
    "ExperimentalSnapshotDataset", "CacheDataset", "CacheDatasetV2", "DataServiceDataset",
    "DataServiceDatasetV2", "DataServiceDatasetV3", "DataServiceDatasetV4",
    "CreateSummaryFileWriter", "CreateSummaryDbWriter", "WriteSummary", "WriteScalarSummary",
    "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary", "WriteGraphSummary",
    "WriteRawProtoSummary", "ImportEvent", "FlushSummaryWriter", "CloseSummaryWriter",
    "SummaryWriter", "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount",
    "DebugNumericSummary", "DebugNumericSummaryV2",
    "LoadAndRemapMatrix", "GenerateVocabRemapping",
    "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",
    "FileSystemSetConfiguration", "RemoteCall",
})
SAVER_OPS = frozenset({
    "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice",
    "MergeV2Checkpoints", "ShardedFilename", "ShardedFilespec",
})
EXIT_FINDINGS, EXIT_UNREADABLE = 3, 2


@dataclass(frozen=True)
class Finding:
    op: str
    node: str
    where: str  # "graph" or the function's name


class UnsafeGraph(ValueError):
    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        ops = sorted({f.op for f in findings})
        super().__init__(f"the SavedModel uses {', '.join(ops)}")


def _node_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":", 1)[0]


def _functions_called(node: Any) -> Iterable[str]:
    for value in node.attr.values():
        if value.HasField("func"):
            yield value.func.name
        if value.HasField("list"):
            yield from (func.name for func in value.list.func)


def _ancestors(nodes: dict[str, Any], targets: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    stack = [_node_name(t) for t in targets if t]
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        stack.extend(_node_name(i) for i in nodes[name].input)
    return seen


def _reachable_functions(functions: dict[str, Any], roots: Iterable[Any]) -> set[str]:
    seen: set[str] = set()
    stack = [name for node in roots for name in _functions_called(node)]
    while stack:
        name = stack.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        stack.extend(n for node in functions[name].node_def for n in _functions_called(node))
    return seen


def _verdict(node: Any, *, saver: bool, allowed: frozenset[str]) -> bool:
    """True when the node is acceptable."""
    if node.op in allowed:
        return True
    if node.op in SAVER_OPS:
        return saver
    if node.op in ("Print", "PrintV2"):
        stream = node.attr["output_stream"].s if "output_stream" in node.attr else b""
        return not stream.startswith(b"file")  # tf.print can append to any file
    return node.op not in FILE_OPS


def meta_graph_findings(meta_graph: Any, *, allowed: frozenset[str]) -> list[Finding]:
    graph = meta_graph.graph_def
    nodes = {node.name: node for node in graph.node}
    functions = {f.signature.name: f for f in graph.library.function}
    saver = meta_graph.saver_def
    saver_nodes = _ancestors(nodes, (saver.save_tensor_name, saver.restore_op_name))
    saver_functions = _reachable_functions(functions, (nodes[n] for n in saver_nodes))
    # What a request can run: every signature's tensors and all they depend on.
    tensors = [t.name for sig in meta_graph.signature_def.values()
               for t in (*sig.inputs.values(), *sig.outputs.values())]
    served_nodes = _ancestors(nodes, tensors)
    served_functions = _reachable_functions(functions, (nodes[n] for n in served_nodes))
    findings = [
        Finding(op=node.op, node=node.name, where="graph") for node in graph.node
        if not _verdict(node, allowed=allowed,
                        saver=node.name in saver_nodes and node.name not in served_nodes)
    ]
    for name, function in functions.items():
        findings += [
            Finding(op=node.op, node=node.name, where=name) for node in function.node_def
            if not _verdict(node, allowed=allowed,
                            saver=name in saver_functions and name not in served_functions)
        ]
    filename = _node_name(saver.filename_tensor_name)
    findings += [Finding(op="saver filename", node=name, where="signature")
                 for name in (_node_name(t) for t in tensors) if filename and name == filename]
    return findings


def saved_model_check(*, path: Path, allowed: frozenset[str] = frozenset()
                      ) -> dict[str, Any]:
    """The serving signatures (see `signatures_describe`); raises UnsafeGraph with every
    finding, OSError/ValueError for what is no SavedModel."""
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
    findings = [f for meta_graph in saved_model.meta_graphs
                for f in meta_graph_findings(meta_graph, allowed=allowed)]
    if findings:
        raise UnsafeGraph(findings)
    serving = [m for m in saved_model.meta_graphs if "serve" in m.meta_info_def.tags]
    return signatures_describe(serving[0]) if serving else {}


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
    args = parser.parse_args(argv)
    allowed = frozenset(op.strip() for op in args.allow.split(",") if op.strip())
    try:
        signatures = saved_model_check(path=args.path, allowed=allowed)
    except UnsafeGraph as unsafe:
        print(json.dumps({"findings": [asdict(f) for f in unsafe.findings[:100]]}))
        return EXIT_FINDINGS
    except (OSError, ValueError) as error:
        print(json.dumps({"error": str(error)}))
        return EXIT_UNREADABLE
    print(json.dumps({"signatures": signatures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
