"""`tfp`: the argument parser and the one place that turns errors into messages and exit codes."""

import argparse
import os
import sys

from tfplatform_cli import (
    annotation_commands,
    audit_commands,
    commands,
    lineage_commands,
    notification_commands,
    search_commands,
    usage_commands,
    workspace_commands,
)
from tfplatform_cli.errors import CliError

DESCRIPTION = """\
Train and serve TensorFlow models on a TF Platform server, through its REST API.

The server is --server, else TFP_SERVER, else the one you logged in to; the token is
TFP_TOKEN, else the one `tfp login` stored in $TFP_CONFIG_DIR (default ~/.config/tfp).
Exit codes: 0 ok, 1 error from the server or the network, 2 wrong usage."""


def parser_build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfp", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", help="the platform's URL, e.g. http://127.0.0.1:8000")
    # On each subcommand too; SUPPRESS keeps it from overwriting a --server given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, parents=[common])

    login = add("login", "log in and store the server URL and an API token")
    login.add_argument("--username", help="asked for when missing")
    login.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    login.set_defaults(run=commands.login)
    add("logout", "revoke the stored token and forget it").set_defaults(run=commands.logout)

    tokens = add("tokens", "list your API tokens (never their keys)")
    tokens.add_argument("--json", action="store_true", help="print the API's JSON")
    tokens.set_defaults(run=commands.tokens_list)
    revoke = add("revoke-token", "revoke one of your API tokens by its id (see `tfp tokens`)")
    revoke.add_argument("id", type=int)
    revoke.set_defaults(run=commands.token_revoke)

    submit = add("submit", "submit an experiment from a YAML or JSON spec; prints its id")
    submit.add_argument(
        "file",
        help="the API's fields (name, model, dataset, hyperparameters, resources, ...); "
        "model_file and dataset_file name local files to upload, relative to the spec",
    )
    submit.add_argument("--wait", action="store_true", help="follow its logs until it finishes")
    submit.set_defaults(run=commands.submit)

    listing = add("list", "list and search the experiments you can see")
    annotation_commands.list_arguments(listing)
    listing.set_defaults(run=commands.experiments_list)
    annotation_commands.parsers_add(add)

    datasets = add("datasets", "list the registered datasets you can use as `dataset`")
    datasets.add_argument("--json", action="store_true", help="print the API's JSON")
    datasets.set_defaults(run=commands.datasets_list)

    status = add("status", "state, strategy, pending reason and latest metrics of an experiment")
    status.add_argument("id", type=int)
    status.add_argument("--json", action="store_true", help="print the API's JSON")
    status.set_defaults(run=commands.status)

    logs = add("logs", "print an experiment's logs")
    logs.add_argument("id", type=int)
    logs.add_argument("-f", "--follow", action="store_true", help="print new lines until it ends")
    logs.set_defaults(run=commands.logs)

    reproduce = add("reproduce", "run a finished experiment again with everything pinned: "
                    "module, dataset version, seed, environment revision; prints its id")
    reproduce.add_argument("id", type=int)
    reproduce.add_argument("--allow-changes", action="store_true",
                           help="run even where something can no longer be pinned (a deleted "
                           "dataset version, a changed module), with what there is now")
    reproduce.add_argument("--wait", action="store_true", help="follow its logs until it ends")
    reproduce.set_defaults(run=lineage_commands.reproduce)

    lineage = add("lineage", "what an experiment's trial ran with: dataset version, "
                  "environment hash and packages, module hash, seed, nodes")
    lineage.add_argument("id", type=int)
    lineage.add_argument("--json", action="store_true", help="print the API's JSON")
    lineage.set_defaults(run=lineage_commands.lineage)

    cancel = add("cancel", "cancel an experiment")
    cancel.add_argument("id", type=int)
    cancel.set_defaults(run=commands.cancel)

    deploy = add("deploy", "deploy a completed experiment's model to the model server")
    deploy.add_argument("id", type=int)
    deploy.add_argument("--name", help="model name (default: from the experiment's name)")
    deploy.add_argument("--wait", action="store_true",
                        help="wait for the experiment to finish, then for the version to load")
    deploy.add_argument("--tflite", action="store_true",
                        help="also convert it to TF Lite, which then serves this version")
    deploy.set_defaults(run=commands.deploy)

    listed = add("artifacts", "list a finished experiment's downloads: model, checkpoints, logs")
    listed.add_argument("id", type=int)
    listed.add_argument("--json", action="store_true", help="print the API's JSON")
    listed.set_defaults(run=commands.artifacts)
    download = add("download", "download one artifact of an experiment as a zip")
    download.add_argument("id", type=int)
    download.add_argument("name", help="model, checkpoints or logs (see `tfp artifacts`)")
    download.add_argument("-o", "--output",
                          help="file or folder to write (default: experiment-ID-NAME.zip)")
    download.set_defaults(run=commands.download)

    # TF Serving's REST API through the platform: a request's JSON in, the answer's JSON out.
    for call, what, request in (
        ("predict", "predict", '{"instances": [...]} or {"inputs": ...}'),
        ("classify", "classify", '{"signature_name": ..., "examples": [...]}'),
        ("regress", "regress", '{"signature_name": ..., "examples": [...]}'),
        ("status", "model status (its versions' states)", None),
        ("metadata", "model metadata (its signatures)", None),
    ):
        name = call if request else f"model-{call}"
        command = add(name, f"send a TF Serving {what} request; prints the JSON answer")
        command.add_argument("model")
        if request:
            command.add_argument("file", help=f"JSON {request}; - for stdin")
        which = command.add_mutually_exclusive_group()
        which.add_argument("--version", type=int, help="ask this version")
        which.add_argument("--label", help="ask the version with this label (stable, canary)")
        command.add_argument("--direct", action="store_true",
                             help="call the model server itself (`tfp serving`), not through "
                                  "the platform's web app")
        command.set_defaults(run=commands.tf_serving, call=call)
    add("serving", "where TF Serving's own gRPC and REST clients reach your models with your "
        "token").set_defaults(run=commands.serving)

    usage = add("usage", "GPU-hours and CPU-slot-hours held per user, team, experiment or UTC "
                "day, and measured GPU utilization: yours and your team's (staff: everyone's)")
    # The API's query parameters, named as it names them; the server checks every value.
    usage.add_argument("--group-by", "--by", dest="group_by", metavar="GROUPS",
                       help="a comma list of user, team, experiment, day (default: user)")
    usage.add_argument("--from", "--since", dest="start", metavar="YYYY-MM-DD",
                       help="first UTC day (default: 29 days before --to)")
    usage.add_argument("--to", "--until", dest="end", metavar="YYYY-MM-DD",
                       help="last UTC day, inclusive (default: today); at most 366 days in all")
    usage.add_argument("--user", help="only this user's experiments")
    usage.add_argument("--team", help="only this team's experiments")
    usage.add_argument("--experiment", type=int, metavar="ID", help="only this experiment")
    output = usage.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the API's JSON")
    output.add_argument("--csv", action="store_true", help="print the API's CSV as it is")
    usage.set_defaults(run=usage_commands.usage)

    audit = add("audit", "the audit log (staff): who cordoned, drained, promoted, changed "
                "quotas, environments or tokens, when, from where, before → after")
    audit.add_argument("--actor", help="only this user's actions (username)")
    audit.add_argument("--action", action="append", metavar="CODE",
                       help="only this action, e.g. node.cordon, label.rollback, quota.change "
                       "(repeat for several)")
    audit.add_argument("--object-type", help="only objects of this kind, e.g. cluster.node")
    audit.add_argument("--object-id", help="only the object with this id (with --object-type)")
    audit.add_argument("--since", metavar="TIME", help="at or after this ISO 8601 time")
    audit.add_argument("--until", metavar="TIME", help="before this ISO 8601 time")
    audit.add_argument("--limit", type=int, default=50, help="entries to show (default 50)")
    audit.add_argument("--offset", type=int, default=0, help="skip this many newer ones")
    audit.add_argument("--json", action="store_true", help="print the API's JSON")
    audit.set_defaults(run=audit_commands.audit)

    notification_commands.parsers_add(add, common=common)

    search = add("search", "hyperparameter searches: many experiments over a search space")
    _search_parsers(search.add_subparsers(dest="search_command", required=True,
                                          metavar="SUBCOMMAND"), common=common)

    workspace = add("workspace", "workspaces: JupyterLab on scheduled devices, with your home")
    _workspace_parsers(workspace.add_subparsers(dest="workspace_command", required=True,
                                                metavar="SUBCOMMAND"), common=common)
    return parser


def _workspace_parsers(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", *,
                       common: argparse.ArgumentParser) -> None:
    def add(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, parents=[common])

    start = add("start", "start a new workspace (--name), or a stopped one again (its id)")
    start.add_argument("id", type=int, nargs="?", help="a stopped workspace to start again")
    start.add_argument("--name", help="a new workspace's name")
    start.add_argument("--gpus", type=int, default=0, help="GPUs (0: CPU slots only)")
    start.add_argument("--cpu-slots", type=int, default=1,
                       help="CPU slots on one node, for a workspace without GPUs (default 1)")
    start.add_argument("--gpu-fraction", type=float,
                       help="instead of whole GPUs: this share of one GPU (0.25, 0.5)")
    start.add_argument("--gpu-memory-mb", type=int,
                       help="instead of whole GPUs: this much of one GPU's memory")
    start.add_argument("--pool", default="", help="only nodes of this pool")
    start.add_argument("--gpu-type", default="", help="only GPUs of this type (with --gpus)")
    start.add_argument("--priority", type=int, default=0)
    start.add_argument("--environment", help="an environment by name")
    start.set_defaults(run=workspace_commands.start)

    listing = add("list", "your workspaces: state, devices and where to open them")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")
    listing.set_defaults(run=workspace_commands.workspaces_list)

    stop = add("stop", "stop a workspace; its devices go back to the queue, its home is kept")
    stop.add_argument("id", type=int)
    stop.set_defaults(run=workspace_commands.stop)

    restart = add("restart", "restart on a new allocation (--gpus, --cpu-slots resize it)")
    restart.add_argument("id", type=int)
    restart.add_argument("--gpus", type=int)
    restart.add_argument("--cpu-slots", type=int,
                         help="CPU slots without GPUs (omitted: kept, or 1 when GPUs are asked)")
    restart.set_defaults(run=workspace_commands.restart)


def _search_parsers(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", *,
                    common: argparse.ArgumentParser) -> None:
    def add(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, parents=[common])

    submit = add("submit", "submit a search from a YAML or JSON spec; prints its id")
    submit.add_argument(
        "file",
        help="an experiment spec (name, model, dataset, hyperparameters, resources, ...) with a "
        "`search:` section (searcher, space, metric, mode, max_trials, max_concurrent, "
        "max_epochs, grace_period, reduction_factor, seed), or all of them at the top level",
    )
    submit.add_argument("--follow", "--wait", action="store_true",
                        help="follow its trials until it ends (as `tfp search follow`)")
    submit.set_defaults(run=search_commands.submit)

    listing = add("list", "list the searches you can see")
    listing.add_argument("-q", "--search", metavar="WORDS",
                         help="words that must each be in the name, a tag or the note")
    listing.add_argument("--tag", action="append", help="carries this tag (repeat: all of them)")
    listing.add_argument("--archived", choices=["false", "true", "any"],
                         help="archived ones are left out unless asked for")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")
    listing.set_defaults(run=search_commands.searches_list)

    show = add("show", "a search's settings, end reason, best trial and table of trials")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true", help="print the API's JSON")
    show.set_defaults(run=search_commands.show)

    follow = add("follow", "print each trial's changes until the search ends; exits 0 only "
                 "when it completed with a best trial")
    follow.add_argument("id", type=int)
    follow.set_defaults(run=search_commands.follow)

    cancel = add("cancel", "end a search and cancel its queued and training trials")
    cancel.add_argument("id", type=int)
    cancel.set_defaults(run=search_commands.cancel)

    deploy = add("deploy-best", "deploy the best completed trial's model to the model server")
    deploy.add_argument("id", type=int)
    deploy.add_argument("--model-name", required=True, help="the model's name to publish as")
    deploy.add_argument("--wait", action="store_true", help="wait for the version to load")
    deploy.add_argument("--tflite", action="store_true",
                        help="also convert it to TF Lite, which then serves this version")
    deploy.set_defaults(run=search_commands.deploy_best)

    csv = add("csv", "the trials table as CSV: a row per trial, a column per hyperparameter")
    csv.add_argument("id", type=int)
    csv.add_argument("-o", "--output", help="file or folder to write (default: stdout)")
    csv.set_defaults(run=search_commands.csv)


def main(argv: list[str] | None = None) -> int:
    parser = parser_build()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except CliError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`tfp list | head`); stop quietly, also at interpreter exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
