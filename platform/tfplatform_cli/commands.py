"""The subcommands: each takes the parsed arguments, prints its result and returns the exit code."""

import argparse
import getpass
import json
import re
import sys
from pathlib import Path
from typing import Any

from tfplatform_cli import config, render
from tfplatform_cli.client import Client
from tfplatform_cli.errors import EXIT_USAGE, CliError
from tfplatform_cli.follow import FINISHED, experiment_follow, version_wait
from tfplatform_cli.spec import spec_load


def login(args: argparse.Namespace) -> int:
    server = config.server_resolve(args.server, ignore_damaged=True)
    if args.password_stdin and not args.username:
        raise CliError("--password-stdin needs --username", exit_code=EXIT_USAGE)
    username = args.username or _ask(f"Username at {server}: ")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {username}: ")
    if not username or not password:
        raise CliError("a username and a password are needed to log in")
    token = Client(server=server).token_obtain(username=username, password=password)
    path = config.credentials_save(
        config.Credentials(server=server, token=token, username=username)
    )
    print(f"Logged in to {server} as {username} (token saved in {path})")
    return 0


def logout(args: argparse.Namespace) -> int:
    stored = config.credentials_load()
    if stored is None:
        print("Not logged in.")
        return 0
    try:  # the token ends on the server too, not only in this file
        Client(server=stored.server, token=stored.token).token_revoke()
        revoked = ""
    except CliError as error:
        revoked = f" (the server did not revoke its token: {error})"
    config.credentials_delete()
    print(f"Logged out of {stored.server}.{revoked}")
    return 0


def tokens_list(args: argparse.Namespace) -> int:
    found = client_for(args).tokens()
    if args.json:
        _print_json(found)
        return 0
    for token in found:
        used = token["last_used_at"] or "never"
        print(f"{token['id']:>6}  {token['prefix']}…  {token['name']}  expires "
              f"{token['expires_at'][:10]}  last used {used[:19]}")
    return 0


def token_revoke(args: argparse.Namespace) -> int:
    client_for(args).token_revoke(args.id)
    print(f"token {args.id} revoked")
    return 0


def submit(args: argparse.Namespace) -> int:
    submission = spec_load(Path(args.file))
    client = client_for(args)
    if submission.files:
        created = client.experiment_create(fields=submission.form_fields(), files=submission.files)
    else:
        created = client.experiment_create(fields=submission.fields, files={})
    print(created["id"], flush=True)
    if args.wait:
        return _completed(experiment_follow(client, int(created["id"]), logs=True))
    return 0


def experiments_list(args: argparse.Namespace) -> int:
    filters = {"state": args.state, "owner": args.owner, "team": args.team, "q": args.search,
               "tag": args.tag, "dataset": args.dataset, "environment": args.environment,
               "model": args.model, "hp": args.hp, "final": args.final, "best": args.best,
               "ordering": args.sort, "archived": args.archived}
    experiments = client_for(args).experiments(filters=filters)
    if args.json:
        _print_json(experiments)
    elif not experiments:
        print("No experiments.")
    else:
        print(render.experiments_table(experiments))
    return 0


def datasets_list(args: argparse.Namespace) -> int:
    datasets = client_for(args).datasets()
    if args.json:
        _print_json(datasets)
    elif not datasets:
        print("No registered datasets.")
    else:
        print(render.datasets_table(datasets))
    return 0


def status(args: argparse.Namespace) -> int:
    client = client_for(args)
    experiment = client.experiment(args.id)
    latest = render.metrics_latest(client.experiment_metrics(args.id))
    if args.json:
        _print_json({**experiment, "latest_metrics": latest})
    else:
        print(render.experiment_status(experiment, latest))
    return 0


def logs(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.follow:
        experiment_follow(client, args.id, logs=True)
        return 0
    text = client.experiment_logs(args.id)
    if text:
        print(text, end="" if text.endswith("\n") else "\n")
    return 0


def cancel(args: argparse.Namespace) -> int:
    experiment = client_for(args).experiment_cancel(args.id)
    if experiment["state"] == "canceled":
        print(f"experiment {args.id} canceled")
    else:
        print(f"experiment {args.id}: its running trial was asked to stop")
    return 0


def deploy(args: argparse.Namespace) -> int:
    client = client_for(args)
    experiment = client.experiment(args.id)
    if args.wait and experiment["state"] not in FINISHED:
        experiment = experiment_follow(client, args.id, logs=False)
    name = args.name or model_name_default(experiment)
    # The server answers once the copy is published; the model loader then loads it.
    version = client.experiment_deploy(args.id, model_name=name, tflite=args.tflite)
    if args.wait:
        version = {**version, **version_wait(client, name=name, version=version["version"])}
    print(
        f"experiment {args.id} deployed as {name} version {version['version']} ({version['state']})"
    )
    if version["state"] not in ("available", "loading") or (
            args.wait and version["state"] != "available"):
        reason = f": {version['error']}" if version.get("error") else ""
        raise CliError(f"{name} version {version['version']} is {version['state']}{reason}")
    return 0


def artifacts(args: argparse.Namespace) -> int:
    found = client_for(args).experiment_artifacts(args.id)
    if args.json:
        _print_json(found)
    elif not found:
        print(f"experiment {args.id} has no artifacts (yet: they appear once it has finished)")
    else:
        print(render.artifacts_table(found))
    return 0


def download(args: argparse.Namespace) -> int:
    target = Path(args.output or f"experiment-{args.id}-{args.name}.zip")
    if target.is_dir():
        target = target / f"experiment-{args.id}-{args.name}.zip"
    client = client_for(args)
    client.experiment(args.id)  # "not found" for an experiment, the server's words for a name
    size = client.experiment_artifact_save(args.id, name=args.name, to=target)
    print(f"{target} ({render.size(size)})")
    return 0


def tf_serving(args: argparse.Namespace) -> int:
    """predict, classify, regress (a JSON request from a file) and model-status, model-metadata
    (none): TF Serving's REST calls through the platform, its JSON answer printed as is."""
    body = _request_body(args.file) if getattr(args, "file", None) else None
    answer, version, label = client_for(args).tf_serving(
        args.model, call=args.call, body=body, version=args.version, label=args.label,
        direct=args.direct,
    )
    _print_json(answer)
    if version or label:
        # On stderr, so that stdout stays the model server's JSON for other programs.
        answered = f"{args.model} version {version or '?'}" + (
            f" (label {label})" if label else "")
        print(f"answered by {answered}", file=sys.stderr)
    return 0


def serving(args: argparse.Namespace) -> int:
    """Where TF Serving's own clients reach your models with your token."""
    endpoints = client_for(args).serving_endpoints()
    if not endpoints.get("grpc") and not endpoints.get("rest"):
        print("The model server takes no direct calls here: use `tfp predict` and the others, "
              "which go through the platform.")
        return 0
    print(f"gRPC  {endpoints.get('grpc')}   (metadata: authorization: Bearer <your token>)")
    print(f"REST  {endpoints.get('rest')}/v1/models/<name>:predict   "
          "(header: Authorization: Bearer <your token>)")
    return 0


def model_name_default(experiment: dict[str, Any]) -> str:
    """The experiment's name as a model name: letters, digits, '.', '_', '-'."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", str(experiment["name"]).lower()).strip("-._")[:100]
    return slug or f"experiment-{experiment['id']}"


def client_for(args: argparse.Namespace) -> Client:
    server = config.server_resolve(args.server)
    return Client(server=server, token=config.token_resolve(server))


def _completed(experiment: dict[str, Any]) -> int:
    if experiment["state"] == "completed":
        return 0
    error = str(experiment.get("error") or "").strip()
    reason = f": {error.splitlines()[-1]}" if error else ""
    raise CliError(f"experiment {experiment['id']} {experiment['state']}{reason}")


def _request_body(name: str) -> bytes:
    try:
        body = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as error:
        raise CliError(f"cannot read {name}: {error.strerror or error}") from error
    try:
        json.loads(body)
    except ValueError as error:
        raise CliError(f"{name} is not valid JSON: {error}") from error
    return body


def _ask(prompt: str) -> str:
    try:
        return input(prompt).strip()
    except EOFError as error:
        raise CliError("no username given: pass --username") from error


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))
