from typing import Any

from django import forms

from tfplatform.cluster.elastic import elastic_range_error
from tfplatform.cluster.selectors import node_pools_and_gpu_types
from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.models import Environment
from tfplatform.experiments.services import admission
from tfplatform.workspaces.services import MAX_CPU_SLOTS
from training import catalog

MODEL_CHOICES = [(name, name) for name in (*catalog.ZOO_MODELS, *catalog.DIAGNOSTIC_JOBS)]
MODEL_CHOICES.append(("upload", "Upload a module (build_model)"))
DATASET_CHOICES = [(name, name) for name in catalog.BUILTIN_DATASETS]
DATASET_CHOICES.append(("upload", "Upload .npz or .csv"))
DEFAULT_MODEL = "mlp"
# The hyperparameters the form shows; the rest keep the catalog's defaults.
FORM_HYPERPARAMETERS = ("epochs", "batch_size", "learning_rate", "optimizer")


def hyperparameter_defaults() -> dict[str, dict[str, Any]]:
    """Per model choice, the values the form proposes: the catalog's, which train well."""
    return {
        model: {
            name: value
            for name, value in catalog.hyperparameters_resolve(
                model=model if model != "upload" else "", values={}
            ).items()
            if name in FORM_HYPERPARAMETERS
        }
        for model, _ in MODEL_CHOICES
    }


GPU_SHARES = [("", "whole GPUs"), ("0.25", "¼ of a GPU"), ("0.5", "½ of a GPU"),
              ("0.75", "¾ of a GPU")]


class ResourcesForm(forms.Form):
    """The resource request alone: the new-experiment form, and its "could it start now?" hint."""

    workers = forms.IntegerField(min_value=1, max_value=64, initial=1)
    gpus_per_worker = forms.IntegerField(
        min_value=0, max_value=16, initial=0, label="GPUs per worker"
    )
    parameter_servers = forms.IntegerField(min_value=0, max_value=16, initial=0)
    priority = forms.IntegerField(
        min_value=-100, max_value=100, initial=0, help_text="Higher runs first and may preempt."
    )
    gpu_fraction = forms.TypedChoiceField(
        required=False, coerce=float, empty_value=None, label="Share of one GPU",
        choices=GPU_SHARES, help_text="Instead of whole GPUs: each worker gets this share.")
    gpu_memory_mb = forms.IntegerField(
        required=False, min_value=1, label="Or GPU memory (MB)",
        help_text="Instead of whole GPUs: each worker gets this much of one GPU's memory.")
    pool = forms.ChoiceField(required=False, help_text="Only nodes of this pool.")
    gpu_type = forms.ChoiceField(required=False, label="GPU type",
                                 help_text="Only GPUs of this type (with GPUs per worker).")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        placement_choices(form=self)


def placement_choices(*, form: forms.Form) -> None:
    """The pools and GPU types of the registered nodes, "any" first."""
    pools, gpu_types = node_pools_and_gpu_types()
    form.fields["pool"].choices = [("", "any pool"), *((p, p) for p in pools)]  # type: ignore[attr-defined]
    form.fields["gpu_type"].choices = [  # type: ignore[attr-defined]
        ("", "any GPU"), *((t, t) for t in gpu_types)]


class ExperimentForm(ResourcesForm):
    min_workers = forms.IntegerField(
        required=False, min_value=1, max_value=64, label="Elastic: fewest workers",
        help_text="Runs at sizes from this to Workers that divide Workers; the global batch "
                  "stays that of the largest.")
    min_gpus_per_worker = forms.IntegerField(
        required=False, min_value=1, max_value=16, label="Elastic: fewest GPUs per worker",
        help_text="Shrunk to this for higher-priority work, grown back when GPUs are idle.")
    name = forms.CharField(max_length=200)
    model = forms.ChoiceField(choices=MODEL_CHOICES, initial=DEFAULT_MODEL)
    model_file = forms.FileField(
        required=False, help_text="A .py module defining build_model(hparams)."
    )
    dataset = forms.ChoiceField(choices=DATASET_CHOICES, initial="digits")
    dataset_file = forms.FileField(required=False)
    label_column = forms.CharField(required=False, help_text="For CSV uploads.")
    environment = forms.ModelChoiceField(
        queryset=Environment.objects.all(),
        required=False,
        to_field_name="name",
        empty_label="Default for the resources",
    )
    epochs = forms.IntegerField(min_value=1, max_value=10_000)
    batch_size = forms.IntegerField(
        min_value=1, max_value=65_536, help_text="Per replica; the global batch scales with them."
    )
    learning_rate = forms.FloatField(min_value=1e-9, max_value=10.0)
    optimizer = forms.ChoiceField(choices=[(name, name) for name in catalog.OPTIMIZERS])
    target_metric = forms.CharField(
        max_length=100,
        required=False,
        help_text="The metric that picks the best epoch: val_accuracy unless you name another "
        "your model reports (val_mae, val_loss...).",
    )
    target_mode = forms.ChoiceField(
        choices=[("", "auto (min for losses and errors)"), ("max", "max"), ("min", "min")],
        required=False,
    )
    target_value = forms.FloatField(
        required=False,
        help_text="The value whose time to reach is reported, e.g. 0.95 for val_accuracy.",
    )
    max_restarts = forms.IntegerField(
        min_value=0, max_value=100, initial=3, help_text="Retries after infrastructure failures."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, value in hyperparameter_defaults()[DEFAULT_MODEL].items():
            self.fields[name].initial = value

    def request_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        hyperparameters: dict[str, Any] = {name: data[name] for name in FORM_HYPERPARAMETERS}
        if data.get("label_column"):
            hyperparameters["label_column"] = data["label_column"]
        return {
            "name": data["name"],
            "model": data["model"],
            "dataset": data["dataset"],
            "hyperparameters": hyperparameters,
            "workers": data["workers"],
            "gpus_per_worker": data["gpus_per_worker"],
            "parameter_servers": data["parameter_servers"],
            "min_workers": data.get("min_workers"),
            "min_gpus_per_worker": data.get("min_gpus_per_worker"),
            "gpu_fraction": data.get("gpu_fraction"),
            "gpu_memory_mb": data.get("gpu_memory_mb") or 0,
            "pool": data.get("pool") or "",
            "gpu_type": data.get("gpu_type") or "",
            "priority": data["priority"],
            "target_metric": data.get("target_metric") or "",
            "target_mode": data.get("target_mode") or "",
            "target_value": data.get("target_value"),
            "max_restarts": data["max_restarts"],
            "environment": data.get("environment"),
            "model_file": data.get("model_file"),
            "dataset_file": data.get("dataset_file"),
        }


class ResourcesFitForm(ResourcesForm):
    """What the "could it start" panel reads: the resources, the elastic range too, checked as
    a submission checks them so the panel never answers for a request that would be refused."""

    min_workers = ExperimentForm.base_fields["min_workers"]
    min_gpus_per_worker = ExperimentForm.base_fields["min_gpus_per_worker"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data  # a field is not even a number: its own message says so
        try:
            data["gpu_milli"] = admission.gpu_share_milli(
                fraction=data.get("gpu_fraction"), memory_mb=data.get("gpu_memory_mb") or 0,
                whole_gpus=data["gpus_per_worker"])
        except InvalidInput as error:
            self.add_error("gpu_fraction" if data.get("gpu_fraction") else "gpu_memory_mb",
                           error.message)
            return data
        error_text = elastic_range_error(
            workers=data["workers"], gpus_per_worker=data["gpus_per_worker"],
            workers_min=data.get("min_workers"),
            gpus_per_worker_min=data.get("min_gpus_per_worker"),
            parameter_servers=data["parameter_servers"],
            gpu_shared=bool(data["gpu_milli"] or data.get("gpu_memory_mb")))
        if error_text:
            given = "min_gpus_per_worker" if data.get("min_gpus_per_worker") else "min_workers"
            self.add_error(given, error_text)
        return data


class EnvironmentForm(forms.Form):
    """Staff's environment form; the services check the packages (pinned, index only)."""

    name = forms.CharField(max_length=100)
    image = forms.CharField(
        max_length=300,
        help_text="Its base image: a container node runs it; a sandbox node uses its own runtime.",
    )
    tensorflow_version = forms.CharField(max_length=20, label="TensorFlow version")
    gpu_capable = forms.BooleanField(required=False, label="GPU capable")
    extra_packages = forms.CharField(
        required=False,
        label="Extra packages",
        widget=forms.Textarea(attrs={"rows": 5, "placeholder": "pyjokes==0.8.3"}),
        help_text="One pinned requirement per line (name==version), installed as wheels.",
    )

    @classmethod
    def for_environment(cls, environment: Environment) -> "EnvironmentForm":
        return cls(
            initial={
                "name": environment.name,
                "image": environment.image,
                "tensorflow_version": environment.tensorflow_version,
                "gpu_capable": environment.gpu_capable,
                "extra_packages": "\n".join(environment.extra_packages),
            }
        )

    def clean_extra_packages(self) -> list[str]:
        lines = self.cleaned_data["extra_packages"].splitlines()
        return [line.strip() for line in lines if line.strip()]


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, initial="api",
                           help_text="What it is for: a script, a notebook, a machine.")
    days = forms.IntegerField(min_value=1, max_value=365, initial=90,
                              help_text="How long it lives, in days.")


class WorkspaceForm(forms.Form):
    name = forms.CharField(max_length=200)
    environment = forms.ModelChoiceField(
        queryset=Environment.objects.all(), required=False, to_field_name="name",
        empty_label="(the first that fits)",
    )
    gpus = forms.IntegerField(
        min_value=0, max_value=16, initial=0, label="GPUs",
        help_text="GPUs are whole devices, never shared with a trial.",
    )
    cpu_slots = forms.IntegerField(
        min_value=1, max_value=MAX_CPU_SLOTS, initial=1, label="CPU slots",
        help_text="On one node, for a workspace without GPUs (with GPUs it holds none).",
    )
    gpu_fraction = forms.TypedChoiceField(
        required=False, coerce=float, empty_value=None, label="Share of one GPU",
        choices=GPU_SHARES, help_text="Instead of whole GPUs (GPUs 0).")
    gpu_memory_mb = forms.IntegerField(required=False, min_value=1, label="Or GPU memory (MB)")

    def clean_gpu_memory_mb(self) -> int:
        return self.cleaned_data.get("gpu_memory_mb") or 0  # empty: none asked for
    pool = forms.ChoiceField(required=False, help_text="Only nodes of this pool.")
    gpu_type = forms.ChoiceField(required=False, label="GPU type",
                                 help_text="Only GPUs of this type (with GPUs).")
    priority = forms.IntegerField(min_value=-100, max_value=100, initial=0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        placement_choices(form=self)


class WorkspaceResizeForm(forms.Form):
    gpus = forms.IntegerField(min_value=0, max_value=16, label="GPUs")
    # Omitted (a form of an older page): kept, or back to 1 with GPUs.
    cpu_slots = forms.IntegerField(min_value=1, max_value=MAX_CPU_SLOTS, label="CPU slots",
                                   required=False)
