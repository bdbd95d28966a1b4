"""Names of the built-in models and datasets, default hyperparameters, and up-front validation.

Kept free of TensorFlow imports so the web process can validate requests without loading TF: every
check here raises `InvalidInput` with a message fit for a 400 response. The same checks run again
inside the trial (a file can change between upload and run), where they are cheap next to training.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from training import arrays
from training.board_layout import board_check, profile_steps_parse
from training.errors import InvalidInput
from training.precision import POLICIES, precision_check
from training.shard_schema import ShardedSource
from training.spec import Resources, TrialSpec
from training.target import target_make

ZOO_MODELS: tuple[str, ...] = ("mlp", "cifar10_cnn", "resnet20", "gru")
BUILTIN_DATASETS: tuple[str, ...] = ("digits", "cifar10", "synthetic_images")
DIAGNOSTIC_JOBS: tuple[str, ...] = ("pi",)
# A workspace session: JupyterLab instead of training (training/workspace/session.py); the platform
# starts these itself, an experiment may not name it.
WORKSPACE_JOB = "workspace"
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd", "rmsprop", "adagrad")
USER_MODULE_ENTRY = "build_model"
USER_DATASET_ENTRY = "build_dataset"

# Every known hyperparameter with its type and default; unknown keys are passed through untouched
# to user modules. batch_size is per replica: the global batch is derived from the allocation.
HYPERPARAMETERS: dict[str, tuple[type, Any]] = {
    "epochs": (int, 10),
    "batch_size": (int, 32),
    "learning_rate": (float, 0.001),
    "optimizer": (str, "adam"),
    "momentum": (float, 0.9),  # sgd / rmsprop only
    "scale_batch_size": (bool, True),
    "warmup_epochs": (int, 0),
    "seed": (int, 42),
    "from_logits": (bool, False),  # user models that end without softmax
    "stop_at_target": (bool, False),
    "augment": (bool, False),  # random flips/crops for image datasets
    "mixed_precision": (str, ""),  # "", "mixed_float16", "mixed_bfloat16" (precision.py)
    "jit_compile": (bool, False),  # XLA
    "tensorboard_histograms": (bool, False),  # weight histograms per epoch (board.py)
    "profile_steps": (str, ""),  # "" | "N" | "start,stop": a profiler trace of those steps
    "hidden_units": (int, 128),  # mlp / gru
    "dropout": (float, 0.0),  # mlp / cifar10_cnn
    "recurrent_layers": (int, 1),  # gru
    "test_fraction": (float, 0.2),  # CSV uploads have no split of their own
    "shuffle_buffer": (int, 10_000),  # examples; registered sharded datasets (registered.py)
    "synthetic_train_size": (int, 2048),
    "synthetic_test_size": (int, 256),
    "throughput_interval_seconds": (float, 5.0),
    # 0: a checkpoint at every epoch's end; N: at most N seconds of training between checkpoints,
    # mid-epoch included, and fewer of them when epochs are short (trial/callbacks.py).
    "checkpoint_interval_seconds": (float, 0.0),
    "pi_samples_per_replica": (int, 1_000_000),
    "pi_rounds": (int, 5),
}
# Every number a user may send is bounded: each bound keeps one trial from exhausting a node
# (synthetic sizes, units, pi samples are memory; throughput_interval_seconds near 0 would
# record a metric every step). (low, high), both included; learning_rate must exceed its low.
BOUNDS: dict[str, tuple[float, float]] = {
    "epochs": (1, 10_000),
    "batch_size": (1, 65_536),
    "learning_rate": (0.0, 10.0),
    "momentum": (0.0, 1.0),
    "warmup_epochs": (0, 1_000),
    "seed": (0, 2**31 - 1),
    "hidden_units": (1, 8_192),
    "dropout": (0.0, 0.95),
    "recurrent_layers": (1, 16),
    "test_fraction": (0.01, 0.99),
    "shuffle_buffer": (0, 1_000_000),
    "synthetic_train_size": (1, 100_000),
    "synthetic_test_size": (1, 20_000),
    "throughput_interval_seconds": (0.5, 3_600.0),
    "checkpoint_interval_seconds": (0.0, 86_400.0),
    "pi_samples_per_replica": (1, 10_000_000),
    "pi_rounds": (1, 1_000),
}
# Settings under which each zoo model is known to train well.
ZOO_DEFAULTS: dict[str, dict[str, Any]] = {
    "mlp": {"batch_size": 32, "learning_rate": 0.001, "optimizer": "adam", "epochs": 20},
    "cifar10_cnn": {"batch_size": 128, "learning_rate": 0.001, "optimizer": "adam", "epochs": 30,
                    "dropout": 0.25, "augment": True},
    "resnet20": {"batch_size": 128, "learning_rate": 0.1, "optimizer": "sgd", "momentum": 0.9,
                 "epochs": 60, "warmup_epochs": 2, "augment": True},
    "gru": {"batch_size": 32, "learning_rate": 0.005, "optimizer": "adam", "epochs": 30,
            "hidden_units": 64},
    "pi": {"epochs": 1},
}


def _coerce(*, name: str, kind: type, value: Any) -> Any:
    # JSON from a form may carry numbers as strings or ints for floats; bool must stay strict
    # because bool("false") is True.
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidInput(f"hyperparameter {name} must be true or false, got {value!r}")
    try:
        if isinstance(value, bool):  # int(True) is 1: a checkbox is not a count
            raise ValueError(value)
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return kind(value)
    except (TypeError, ValueError, OverflowError) as exc:  # int(inf) overflows
        raise InvalidInput(f"hyperparameter {name} must be {kind.__name__}, got {value!r}") from exc


def hyperparameters_resolve(*, model: str, values: dict[str, Any]) -> dict[str, Any]:
    """Defaults, then the zoo model's defaults, then the user's values, all type-checked."""
    resolved: dict[str, Any] = {name: default for name, (_, default) in HYPERPARAMETERS.items()}
    resolved.update(ZOO_DEFAULTS.get(model, {}))
    for name, value in values.items():
        kind = HYPERPARAMETERS.get(name, (None, None))[0]
        resolved[name] = value if kind is None else _coerce(name=name, kind=kind, value=value)
    if resolved["optimizer"] not in OPTIMIZERS:
        raise InvalidInput(f"optimizer must be one of {', '.join(OPTIMIZERS)}")
    if resolved["mixed_precision"] not in POLICIES:
        raise InvalidInput(
            f"mixed_precision must be one of {', '.join(repr(p) for p in POLICIES)}, "
            f"got {resolved['mixed_precision']!r}"
        )
    profile_steps_parse(value=resolved["profile_steps"])
    for name, (low, high) in BOUNDS.items():
        value = resolved[name]
        # Written so that NaN (which compares False with everything) fails too.
        if not low <= value <= high or (name == "learning_rate" and not value > low):
            shown = f"greater than {low}" if name == "learning_rate" else f"at least {low}"
            raise InvalidInput(
                f"hyperparameter {name} must be {shown} and at most {high}, got {value!r}"
            )
    return resolved


def user_module_validate(*, path: str) -> set[str]:
    """The module compiles and defines a top-level build_model(hparams); nothing is executed.

    Returns the names of its top-level functions (build_dataset among them, perhaps).
    """
    file = Path(path)
    if file.suffix != ".py" or not file.is_file():
        raise InvalidInput(f"model module {path} must be an existing .py file")
    source = file.read_text(encoding="utf-8", errors="replace")
    try:
        # compile() also catches what only the compiler sees ('return' outside a function...).
        compile(source, str(file), "exec", dont_inherit=True)
        tree = ast.parse(source, filename=str(file))
    except SyntaxError as exc:
        raise InvalidInput(
            f"{file.name} line {exc.lineno}: SyntaxError: {exc.msg}"
            + (f"\n    {exc.text.rstrip()}" if exc.text else "")
        ) from exc
    functions = {
        node.name: node for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    entry = functions.get(USER_MODULE_ENTRY)
    if entry is None:
        raise InvalidInput(f"{file.name} must define a top-level function build_model(hparams)")
    if not (entry.args.args or entry.args.vararg):
        raise InvalidInput(f"{file.name}: build_model must take one argument (the hyperparameters)")
    return set(functions)


def builtin_module_path(*, model: str) -> Path | None:
    """The source of a built-in model (the zoo's module) or job, which a trial's lineage hashes;
    None for any other model."""
    trial = Path(__file__).resolve().parent / "trial"
    if model in ZOO_MODELS:
        return trial / "zoo.py"
    if model in DIAGNOSTIC_JOBS:
        return trial / f"{model}.py"
    return None


def model_validate(*, model: str) -> None:
    if model in ZOO_MODELS or model in DIAGNOSTIC_JOBS or model == WORKSPACE_JOB:
        return
    if not model.endswith(".py"):
        raise InvalidInput(
            f"unknown model {model!r}: use one of {', '.join(ZOO_MODELS + DIAGNOSTIC_JOBS)} "
            "or upload a .py module defining build_model(hparams)"
        )
    user_module_validate(path=model)


def dataset_load(*, spec: TrialSpec, hparams: dict[str, Any]) -> arrays.ArrayData:
    """The arrays for the spec's dataset; the single place that maps a dataset name to a loader."""
    name = spec.dataset
    if name == "digits":
        return arrays.digits_load()
    if name == "cifar10":
        return arrays.cifar10_load(datasets_dir=spec.datasets_dir)
    if name == "synthetic_images":
        return arrays.synthetic_images_load(
            train_size=hparams["synthetic_train_size"], test_size=hparams["synthetic_test_size"],
            seed=hparams["seed"],
        )
    if not Path(name).is_file():
        raise InvalidInput(
            f"unknown dataset {name!r}: use one of {', '.join(BUILTIN_DATASETS)} "
            "or upload an .npz or .csv file"
        )
    if name.endswith(".npz"):
        return arrays.npz_load(path=name)
    if name.endswith(".csv"):
        return arrays.csv_load(
            path=name, label_column=spec.label_column, test_fraction=hparams["test_fraction"],
            seed=hparams["seed"],
        )
    raise InvalidInput(f"dataset file {Path(name).name} must be .npz or .csv")


def dataset_validate(*, spec: TrialSpec) -> dict[str, object]:
    """Loads uploads (and cifar10 when its directory is configured) to check them; a summary."""
    if spec.model in DIAGNOSTIC_JOBS or spec.model == WORKSPACE_JOB:
        return {}
    if spec.dataset_source:  # registered shards: checked at registration, never loaded here
        return ShardedSource.from_dict(spec.dataset_source).summary()
    if spec.model.endswith(".py") and USER_DATASET_ENTRY in user_module_validate(path=spec.model):
        return {"name": f"{Path(spec.model).stem}.{USER_DATASET_ENTRY}"}  # known only at run time
    if spec.dataset == "cifar10":
        # 50,000 images are too much to load per request: presence is checked, not content.
        if spec.datasets_dir:  # otherwise where it lives is the trial host's business
            arrays.cifar10_check(datasets_dir=spec.datasets_dir)
        return {"name": "cifar10", "input_shape": [32, 32, 3], "input_dtype": "uint8",
                "num_classes": 10}
    hparams = hyperparameters_resolve(model=spec.model, values=spec.hyperparameters)
    summary = dataset_load(spec=spec, hparams=hparams).summary()
    if summary["num_classes"] is None and spec.model in ZOO_MODELS:
        raise InvalidInput(
            f"the built-in model {spec.model} is a classifier, so the dataset's labels must be "
            "integer class ids; for regression or other targets, upload a module that "
            "compiles its own loss"
        )
    return summary


def resources_validate(*, resources: Resources) -> None:
    if resources.workers < 1:
        raise InvalidInput("a trial needs at least one worker")
    if resources.gpus_per_worker < 0 or resources.parameter_servers < 0:
        raise InvalidInput("GPU and parameter-server counts must not be negative")
    wanted = resources.workers * resources.gpus_per_worker
    if resources.gpu_ids and len(resources.gpu_ids) != wanted:
        raise InvalidInput(f"{len(resources.gpu_ids)} GPU ids granted for {wanted} GPU slots")


def spec_validate(*, spec: TrialSpec) -> dict[str, object]:
    """Everything the web process can check before queueing; returns the dataset summary."""
    if not spec.trial_id or not spec.work_dir:
        raise InvalidInput("a trial needs an id and a work directory")
    model_validate(model=spec.model)
    resources_validate(resources=spec.resources)
    hparams = hyperparameters_resolve(model=spec.model, values=spec.hyperparameters)
    precision_check(policy=hparams["mixed_precision"], jit_compile=hparams["jit_compile"],
                    resources=spec.resources)
    board_check(profile_steps=hparams["profile_steps"], resources=spec.resources)
    target_make(metric=spec.target_metric, mode=spec.target_mode, value=spec.target_value)
    return dataset_validate(spec=spec)
