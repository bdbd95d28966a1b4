"""tensorflow_model_server's config files and its version policy.

BatchingParameters is not shipped in the tensorflow-serving-api wheel, so its message is built
here from the field list of session_bundle_config.proto; text_format then gives the same
grammar and the same rejection of unknown fields as the C++ server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,
)
from tensorflow_serving.config import model_server_config_pb2

_BATCHING_FIELDS = (
    ("max_batch_size", 1, ".google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, ".google.protobuf.Int64Value"),
    ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
    ("thread_pool_name", 5, ".google.protobuf.StringValue"),
    ("allowed_batch_sizes", 6, None),
    ("pad_variable_length_inputs", 7, None),
    ("enable_large_batch_splitting", 8, ".google.protobuf.BoolValue"),
    ("max_execution_batch_size", 9, ".google.protobuf.Int64Value"),
)


def _batching_message_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(
        name="serving/batching_parameters.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = proto.message_type.add(name="BatchingParameters")
    kinds = descriptor_pb2.FieldDescriptorProto
    for name, number, type_name in _BATCHING_FIELDS:
        field = message.field.add(name=name, number=number, label=kinds.LABEL_OPTIONAL)
        if type_name:
            field.type, field.type_name = kinds.TYPE_MESSAGE, type_name
        elif name == "allowed_batch_sizes":
            field.type, field.label = kinds.TYPE_INT64, kinds.LABEL_REPEATED
        else:
            field.type = kinds.TYPE_BOOL
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    )


BatchingParametersProto = _batching_message_class()


@dataclass(frozen=True)
class BatchingOptions:
    """SharedBatchScheduler's queue options, with its defaults."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = 0  # 0: one per CPU, like port::MaxParallelism()
    allowed_batch_sizes: tuple[int, ...] = ()
    enable_large_batch_splitting: bool = False


def parse_batching_parameters(text: str) -> BatchingOptions:
    proto = text_format.Parse(text, BatchingParametersProto())
    defaults = BatchingOptions()

    def wrapped(name: str, default: Any) -> Any:
        return getattr(proto, name).value if proto.HasField(name) else default

    return BatchingOptions(
        max_batch_size=wrapped("max_batch_size", defaults.max_batch_size),
        batch_timeout_micros=wrapped("batch_timeout_micros", defaults.batch_timeout_micros),
        max_enqueued_batches=wrapped("max_enqueued_batches", defaults.max_enqueued_batches),
        num_batch_threads=wrapped("num_batch_threads", defaults.num_batch_threads),
        allowed_batch_sizes=tuple(proto.allowed_batch_sizes),
        enable_large_batch_splitting=wrapped("enable_large_batch_splitting", False),
    )


def read_model_server_config(path: Path) -> model_server_config_pb2.ModelServerConfig:
    try:
        return text_format.Parse(path.read_text(), model_server_config_pb2.ModelServerConfig())
    except text_format.ParseError as exc:
        # The wording of TF Serving's ParseProtoTextFile, which its own tests look for.
        raise ValueError(
            f"Error parsing text-format tensorflow.serving.ModelServerConfig: {exc}"
        ) from exc


def single_model_config(*, name: str, base_path: str) -> model_server_config_pb2.ModelServerConfig:
    """BuildSingleModelConfig: what --model_name/--model_base_path stand for."""
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.config.add(name=name, base_path=base_path, model_platform="tensorflow")
    return config


def aspired_versions(*, policy: Any, available: Iterable[int]) -> tuple[set[int], list[int]]:
    """FileSystemStoragePathSource: (versions to serve, requested versions missing on disk)."""
    on_disk = set(available)
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return on_disk, []
    if which == "specific":
        wanted = set(policy.specific.versions)
        return wanted & on_disk, sorted(wanted - on_disk)
    count = max(policy.latest.num_versions, 1) if which == "latest" else 1
    return set(sorted(on_disk)[-count:]), []
