"""The new-search form: what every trial shares, the searcher's settings, and the space as a
small table with a row per hyperparameter (a formset, so each row's errors sit beside it).

The form only reads the rows' shape; whether a range makes sense (low below high, a log scale
above zero, a step on an int range) is the searches service's to say, once, for the API too.
"""

import json
import math
import re
from typing import Any, cast

from django import forms

from tfplatform.experiments.models import Environment
from tfplatform.searches.searchers import SEARCHERS
from tfplatform.web.forms import DATASET_CHOICES, DEFAULT_MODEL, MODEL_CHOICES, ResourcesForm

KIND_CHOICES = [("choice", "list of values"), ("float", "float range"), ("int", "int range")]
SPACE_ROWS_BLANK = 2
SPACE_ROWS_MAX = 20
# What a fresh form proposes: a log-scaled rate and a list, the two kinds most searches mix.
SPACE_EXAMPLE: list[dict[str, Any]] = [
    {"name": "learning_rate", "kind": "float", "low": 0.0001, "high": 0.1, "log": True},
    {"name": "optimizer", "kind": "choice", "values": "adam, sgd"},
]


def values_parse(text: str) -> list[Any]:
    """`32, 64, adam, true` as [32, 64, "adam", True]: numbers and booleans as such, the rest
    as strings, so a list of numbers samples numbers."""
    return [_scalar(item.strip()) for item in text.split(",") if item.strip()]


def _scalar(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for number in (int, float):
        try:
            value = number(text)
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    return text


class SpaceRowForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    kind = forms.ChoiceField(choices=KIND_CHOICES, initial="choice")
    values = forms.CharField(
        max_length=2000, required=False,
        widget=forms.TextInput(attrs={"placeholder": "32, 64, 128"}))
    low = forms.FloatField(required=False)
    high = forms.FloatField(required=False)
    step = forms.IntegerField(required=False, min_value=1)
    log = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        filled = any(data.get(name) not in (None, "", False)
                     for name in ("values", "low", "high", "step", "log"))
        if not data.get("name") and filled:
            self.add_error("name", "Name the hyperparameter this row searches.")
        if not data.get("name"):
            return data
        if data.get("kind") == "choice":
            if not values_parse(data.get("values") or ""):
                self.add_error("values", "List its values, separated by commas.")
        else:
            for end in ("low", "high"):
                if data.get(end) is None and not self.has_error(end):
                    self.add_error(end, "A range needs both ends.")
        return data

    def entry(self) -> tuple[str, dict[str, Any]] | None:
        """This row as the space's {name: range}; None for a blank row."""
        data = self.cleaned_data
        if not data.get("name"):
            return None
        if data["kind"] == "choice":
            return data["name"], {"values": values_parse(data["values"])}
        low, high = data["low"], data["high"]
        if data["kind"] == "int":
            # Whole numbers as ints; anything else goes on for the service to refuse by name.
            low, high = (int(v) if float(v).is_integer() else v for v in (low, high))
        entry: dict[str, Any] = {"type": data["kind"], "low": low, "high": high}
        if data.get("log"):
            entry["log"] = True
        if data.get("step") is not None:
            entry["step"] = data["step"]
        return data["name"], entry


class BaseSpaceFormSet(forms.BaseFormSet):
    def clean(self) -> None:
        if any(self.errors):
            return
        names = [entry[0] for entry in self.entries()]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise forms.ValidationError(f"One row per hyperparameter: {', '.join(repeated)} "
                                        "appears more than once.")

    def entries(self) -> list[tuple[str, dict[str, Any]]]:
        return [entry for form in self.forms if (entry := form.entry()) is not None]

    def space(self) -> dict[str, Any]:
        return dict(self.entries())

    def service_error(self, *, message: str) -> None:
        """The service's error about the space: on the row it names (`space.<name>...`), else
        above the table."""
        named = re.match(r"space\.([^:.\s]+)", message)
        for form in self.forms:
            if named and form.is_valid() and form.cleaned_data.get("name") == named[1]:
                form.add_error(None, message)
                return
        self.non_form_errors().append(message)


SpaceFormSet = forms.formset_factory(
    SpaceRowForm, formset=BaseSpaceFormSet, extra=SPACE_ROWS_BLANK, max_num=SPACE_ROWS_MAX,
    absolute_max=SPACE_ROWS_MAX, validate_max=True,
)


def space_formset(data: Any = None) -> BaseSpaceFormSet:
    # formset_factory's class is a BaseSpaceFormSet; the stubs type it as the base class.
    return cast(BaseSpaceFormSet,
                SpaceFormSet(data, prefix="space", initial=None if data else SPACE_EXAMPLE))


class SearchForm(ResourcesForm):
    name = forms.CharField(max_length=200)
    model = forms.ChoiceField(choices=[c for c in MODEL_CHOICES if c[0] != "upload"],
                              initial=DEFAULT_MODEL)
    dataset = forms.ChoiceField(choices=[c for c in DATASET_CHOICES if c[0] != "upload"],
                                initial="digits")
    searcher = forms.ChoiceField(
        choices=[(name, name) for name in SEARCHERS], initial="random",
        help_text="grid: every combination of the lists; random: samples the space; adaptive: "
                  "random, and only the best trials of each rung train on.")
    metric = forms.CharField(max_length=100, initial="val_accuracy",
                             help_text="The metric that ranks trials (val_accuracy, val_loss...).")
    mode = forms.ChoiceField(
        choices=[("", "auto (min for losses and errors)"), ("max", "max"), ("min", "min")],
        required=False, label="Direction")
    max_trials = forms.IntegerField(
        min_value=1, required=False, help_text="Blank: every grid point; 10 otherwise.")
    max_concurrent = forms.IntegerField(min_value=1, initial=2,
                                        help_text="Trials queued or training at once.")
    max_epochs = forms.IntegerField(
        min_value=1, required=False,
        help_text="Each trial's epochs (adaptive: the last rung's); blank: the model's default.")
    grace_period = forms.IntegerField(
        min_value=1, initial=1, help_text="Adaptive: epochs every trial trains before ranking.")
    reduction_factor = forms.IntegerField(
        min_value=2, initial=3, help_text="Adaptive: the best 1/n of a rung go on, n× longer.")
    seed = forms.IntegerField(min_value=0, initial=0)
    hyperparameters = forms.CharField(
        required=False, label="Fixed hyperparameters",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": '{"batch_size": 64}'}),
        help_text="JSON: values every trial shares; the space's override them.")
    environment = forms.ModelChoiceField(
        queryset=Environment.objects.all(),
        required=False, to_field_name="name", empty_label="Default for the resources")
    max_restarts = forms.IntegerField(min_value=0, max_value=100, initial=3,
                                      help_text="Retries after infrastructure failures.")

    def clean_hyperparameters(self) -> dict[str, Any]:
        text = self.cleaned_data["hyperparameters"].strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"Not JSON: {error}.") from error
        if not isinstance(value, dict):
            raise forms.ValidationError('A JSON object: {"name": value, ...}.')
        return value

    def request_kwargs(self, *, space: dict[str, Any]) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            **{name: data[name] for name in (
                "name", "model", "dataset", "searcher", "metric", "max_trials", "max_concurrent",
                "max_epochs", "grace_period", "reduction_factor", "seed", "hyperparameters",
                "workers", "gpus_per_worker", "parameter_servers", "priority", "max_restarts",
                "environment")},
            "mode": data.get("mode") or "",
            "space": space,
        }
