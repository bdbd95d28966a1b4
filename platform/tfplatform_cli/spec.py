"""Experiment spec files: the API's fields in YAML or JSON, plus local files to upload."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tfplatform_cli.errors import CliError

UPLOAD_FIELDS = ("model_file", "dataset_file")


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
    data = _parse(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: the spec must be a mapping of fields (name, model, dataset, ...)")
    fields = {str(name): value for name, value in data.items()}
    files = {}
    for name in UPLOAD_FIELDS:
        if name in fields:
            files[name] = _upload(path, name=name, value=fields.pop(name))
    return Submission(fields=fields, files=files)


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
