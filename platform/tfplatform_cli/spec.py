"""Spec files: an experiment's or a search's API fields in YAML or JSON. An experiment spec may
name local files to upload; a search spec is an experiment spec (what every trial trains) with a
`search:` section (how to search), or the search API's fields all at the top level."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tfplatform_cli.errors import CliError

UPLOAD_FIELDS = ("model_file", "dataset_file")
SEARCH_SECTION = "search"


@dataclass(frozen=True)
class Submission:
    fields: dict[str, Any]
    files: dict[str, tuple[str, bytes]]

    def form_fields(self) -> dict[str, str]:
        """The fields as multipart form values; objects travel JSON-encoded, as the API expects."""
        form = {}
        for name, value in self.fields.items():
            if value is None:
                continue  # absent means the API's default, which is what null asks for
            form[name] = json.dumps(value) if isinstance(value, dict | list | bool) else str(value)
        return form


def spec_load(path: Path) -> Submission:
    fields = _fields(path)
    if SEARCH_SECTION in fields or "space" in fields:
        raise CliError(f"{path} is a search spec: submit it with `tfp search submit`")
    files = {}
    for name in UPLOAD_FIELDS:
        if name in fields:
            files[name] = _upload(path, name=name, value=fields.pop(name))
    return Submission(fields=fields, files=files)


def search_spec_load(path: Path) -> dict[str, Any]:
    """The search API's fields: the top level's, and those of its `search:` section."""
    fields = _fields(path)
    section = fields.pop(SEARCH_SECTION, {})
    if not isinstance(section, dict):
        raise CliError(f"{path}: {SEARCH_SECTION} must be a mapping of fields "
                       "(searcher, space, metric, max_trials, ...)")
    both = sorted(set(fields) & {str(name) for name in section})
    if both:
        raise CliError(f"{path}: {', '.join(both)} both at the top level and under "
                       f"{SEARCH_SECTION}: give each once")
    for name in UPLOAD_FIELDS:
        if name in fields or name in section:
            # The search API takes JSON only: every trial names a registered model and dataset.
            raise CliError(f"{path}: {name}: a search's trials train a model and dataset the "
                           "platform knows by name; files are uploaded by `tfp submit` only")
    return {**fields, **{str(name): value for name, value in section.items()}}


def _fields(path: Path) -> dict[str, Any]:
    data = _parse(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: the spec must be a mapping of fields (name, model, dataset, ...)")
    return {str(name): value for name, value in data.items()}


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise CliError(f"{path} is not a text file") from error
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise CliError(
                f"{path} is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
            ) from error
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CliError(f"{path} is not valid YAML: {_yaml_problem(error)}") from error


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(error)


def _upload(spec: Path, *, name: str, value: Any) -> tuple[str, bytes]:
    """A local file named in the spec, relative to the spec's own folder."""
    if not isinstance(value, str) or not value:
        raise CliError(f"{spec}: {name} must be the path of a local file")
    file = (spec.parent / Path(value).expanduser()).resolve()
    try:
        return file.name, file.read_bytes()
    except OSError as error:
        raise CliError(f"{spec}: {name} {value}: {error.strerror or error}") from error
