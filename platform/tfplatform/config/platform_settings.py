"""The platform's own settings: one frozen, typed object built once from the environment.

`settings.PLATFORM` is a `PlatformSettings`, read by attribute (`settings.PLATFORM.work_dir`):
django-stubs types it from settings.py, so a misspelt field is a mypy error, not a KeyError at
run time. Each field
names its environment variable, a one-line description and its group; the configuration page
of the docs is generated from them (`manage.py settings_table`).
"""

# Each field's default is given through _setting (a dataclasses.field with its metadata).
# ruff: noqa: RUF009

import dataclasses
import socket
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

GROUPS = (
    "Node", "Storage", "Trials and isolation", "Containers", "Scheduling and quotas",
    "Model serving", "TensorBoard", "Workspaces", "API and security", "Single sign-on",
    "Notifications", "Monitoring",
)
# accounts.Team.name's length (settings are read before any app's models can be imported).
TEAM_NAME_MAX = 100


def _setting(*, env: str | None, doc: str, group: str, default: Any = dataclasses.MISSING,
             var: str | None = None, default_doc: str | None = None) -> Any:
    """A field of PlatformSettings. `env`: its variable (None: fixed, not configurable);
    `var`: its default is this folder under PLATFORM_VAR_DIR; `default_doc`: how the
    configuration table shows a default computed at start-up."""
    assert group in GROUPS, group
    metadata = {"env": env, "doc": doc, "group": group, "var": var, "default_doc": default_doc}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class PlatformSettings:
    # Node
    node_name: str = _setting(env="PLATFORM_NODE_NAME", group="Node", default_doc="the host name",
                              doc="This node's name in the cluster.")
    node_address: str = _setting(env="PLATFORM_NODE_ADDRESS", group="Node", default="127.0.0.1",
                                 doc="The address other nodes reach this node's tasks at.")
    node_pool: str = _setting(
        env="PLATFORM_NODE_POOL", group="Node", default="default",
        doc="The pool this node belongs to; experiments and workspaces may ask for a pool.")
    node_labels: tuple[str, ...] = _setting(
        env="PLATFORM_NODE_LABELS", group="Node", default=(),
        doc="Labels this node carries, as `key=value` (comma-separated); shown on the cluster "
            "page and in the nodes API.")
    gpu_type: str = _setting(
        env="PLATFORM_GPU_TYPE", group="Node", default="",
        doc="The GPU type this node's GPUs are scheduled as; empty: NVML's name of its first "
            "GPU (emulated slots have none unless this names one).")
    gpu_mps: bool = _setting(
        env="PLATFORM_GPU_MPS", group="Node", default=False,
        doc="This node runs NVIDIA MPS: a task with a share of a GPU also gets MPS's pinned "
            "memory limit and active-thread percentage for it.")
    declared_gpu_slots: int = _setting(
        env="PLATFORM_GPU_SLOTS", group="Node", default=0,
        doc="Accelerator slots declared for this node; on a CPU-only machine each is a logical "
            "CPU device.")
    warm_trial_processes: int = _setting(
        env="PLATFORM_WARM_TRIAL_PROCESSES", group="Node", default=1,
        doc="Task processes per node kept ready with TensorFlow imported (0: no warm start).")
    warm_idle_priority: bool = _setting(
        env="PLATFORM_WARM_IDLE_PRIORITY", group="Node", default=True,
        doc="Warm task processes import TensorFlow at idle priority (SCHED_IDLE), so a refill "
            "never slows a trial that trains meanwhile; the task one becomes runs at normal "
            "priority.")
    heartbeat_seconds: float = _setting(env="PLATFORM_HEARTBEAT_SECONDS", group="Node",
                                        default=5.0, doc="How often a node reports itself alive.")
    node_lost_seconds: float = _setting(
        env="PLATFORM_NODE_LOST_SECONDS", group="Node", default=30.0,
        doc="A node silent this long is lost: its trials are failed and requeued.")
    work_disk_min_free_mb: int = _setting(
        env="PLATFORM_WORK_DISK_MIN_FREE_MB", group="Node", default=256,
        doc="A node with less free space under the work or run folder gets no new trials.")
    # Storage
    model_base_path: Path = _setting(env="MODEL_BASE_PATH", group="Storage", var="models",
                                     doc="Where the model server reads the deployed SavedModels.")
    max_upload_bytes: int = _setting(
        env="PLATFORM_MAX_UPLOAD_BYTES", group="Storage", default=520 * 2**20,
        doc="The largest multipart request (its files together); refused while it is read.")
    model_import_dir: Path = _setting(
        env="PLATFORM_MODEL_IMPORT_DIR", group="Storage", var="import",
        doc="The one folder staff may register SavedModels from by path.")
    datasets_dir: Path = _setting(env="DATASETS_DIR", group="Storage", var="datasets",
                                  doc="Where uploaded datasets are kept.")
    dataset_roots: tuple[Path, ...] = _setting(
        env="PLATFORM_DATASET_ROOTS", group="Storage", var="data",
        doc="The only folders a registered (sharded) dataset may live in (comma-separated).")
    shared_dir: Path = _setting(
        env="PLATFORM_SHARED_DIR", group="Storage", var="shared",
        doc="Modules and datasets referenced by path must live here.")
    work_dir: Path = _setting(env="PLATFORM_WORK_DIR", group="Storage", var="work",
                              doc="Trials' working folders (checkpoints, exports, TensorBoard).")
    run_dir: Path = _setting(
        env="PLATFORM_RUN_DIR", group="Storage", var="runs",
        doc="The supervisor's own files of each attempt; never mounted writable into a trial.")
    environments_dir: Path = _setting(
        env="PLATFORM_ENVIRONMENTS_DIR", group="Storage", var="environments",
        doc="Per-node virtualenvs of environments (sandbox runtime), one per content hash.")
    user_storage_quota_mb: int = _setting(
        env="PLATFORM_USER_STORAGE_QUOTA_MB", group="Storage", default=20 * 1024,
        doc="What one user's uploads and model versions may take on disk (0: no limit).")
    # Trials and isolation
    trial_runtime: str = _setting(
        env="PLATFORM_TRIAL_RUNTIME", group="Trials and isolation", default="sandbox",
        doc="How trials are isolated: sandbox, docker, podman or process (no isolation).")
    landlock_abi: int | None = _setting(
        env="PLATFORM_LANDLOCK_ABI", group="Trials and isolation", default=None,
        doc="The highest Landlock ABI tasks are confined with (unset: the kernel's; 0: off).")
    task_fork_server: bool = _setting(
        env="PLATFORM_TASK_FORK_SERVER", group="Trials and isolation", default=True,
        doc="Fork sandboxed tasks from one process that imported TensorFlow (a root node's).")
    task_fork_server_socket: str = _setting(
        env="PLATFORM_TASK_FORK_SERVER_SOCKET", group="Trials and isolation", default="",
        doc="The machine's fork server, shared by its nodes (empty: each node starts its own).")
    gang_subnet: str = _setting(
        env="PLATFORM_GANG_SUBNET", group="Trials and isolation", default="100.64.0.0/16",
        doc="Pool of the per-gang networks of a root node (sandbox runtime); empty: host's.")
    task_port_base: int = _setting(
        env="PLATFORM_TASK_PORT_BASE", group="Trials and isolation", default=20000,
        doc="First port of TF tasks in gangs spanning nodes (below the ephemeral range).")
    task_port_span: int = _setting(
        env="PLATFORM_TASK_PORT_SPAN", group="Trials and isolation", default=5000,
        doc="Ports of tasks: [base, base + 2 * span).")
    max_workers: int = _setting(env=None, group="Trials and isolation", default=64,
                                doc="The most workers a trial may ask for.")
    max_gpus_per_worker: int = _setting(env=None, group="Trials and isolation", default=16,
                                        doc="The most GPUs one worker may ask for.")
    max_parameter_servers: int = _setting(env=None, group="Trials and isolation", default=16,
                                          doc="The most parameter servers a trial may ask for.")
    spark_local_masters: bool = _setting(
        env="PLATFORM_SPARK_LOCAL_MASTERS", group="Trials and isolation", default=False,
        doc="Staff may register a Spark cluster whose master is `local[N]` or "
            "`local-cluster[...]`: its executors, and so users' code, then run on the Spark "
            "node's machine as its user, without a sandbox. Development and tests only.")
    # Containers
    container_engine_url: str = _setting(
        env="PLATFORM_CONTAINER_ENGINE_URL", group="Containers", default="",
        doc="The docker/podman engine's API (podman: `podman system service`).")
    container_oci_runtime: str = _setting(
        env="PLATFORM_CONTAINER_OCI_RUNTIME", group="Containers", default="",
        doc="The OCI runtime to ask the engine for (empty: the engine's default).")
    container_image: str = _setting(
        env="PLATFORM_CONTAINER_IMAGE", group="Containers", default="",
        doc="Image of warm containers and trials without an environment (empty: the node's).")
    container_memory_mb: int = _setting(
        env="PLATFORM_CONTAINER_MEMORY_MB", group="Containers", default=0,
        doc="Memory per device slot a task holds (0: the node's divided by its slots).")
    container_cpus: float = _setting(
        env="PLATFORM_CONTAINER_CPUS", group="Containers", default=0.0,
        doc="CPUs per device slot a task holds (0: no quota, a weight only).")
    container_pids: int = _setting(env="PLATFORM_CONTAINER_PIDS", group="Containers",
                                   default=4096, doc="Processes a task's container may hold.")
    container_gang_network: str = _setting(
        env="PLATFORM_CONTAINER_GANG_NETWORK", group="Containers", default="host",
        doc="A gang across nodes: host (several machines) or gang (one engine's network).")
    container_workspace_network: str = _setting(
        env="PLATFORM_CONTAINER_WORKSPACE_NETWORK", group="Containers", default="relay",
        doc="How a workspace's container reaches the API: relay, host or a network's name.")
    # Scheduling and quotas
    idle_gpu_minutes: float = _setting(
        env="PLATFORM_IDLE_GPU_MINUTES", group="Scheduling and quotas", default=30.0,
        doc="A held GPU measured ~0 % busy this long is flagged idle on the cluster page.")
    scheduler_interval_seconds: float = _setting(
        env="PLATFORM_SCHEDULER_INTERVAL", group="Scheduling and quotas", default=5.0,
        doc="The scheduler loop's pace (events wake it sooner).")
    elastic_grow_after_seconds: float = _setting(
        env="PLATFORM_ELASTIC_GROW_AFTER_SECONDS", group="Scheduling and quotas", default=300.0,
        doc="An elastic trial runs this long before it is grown onto idle devices (a resize "
            "costs a checkpoint and a restart).")
    dispatch_retry_seconds: float = _setting(
        env="PLATFORM_DISPATCH_RETRY_SECONDS", group="Scheduling and quotas", default=60.0,
        doc="A trial no node took up within this long is sent again.")
    user_max_priority: int = _setting(
        env="PLATFORM_USER_MAX_PRIORITY", group="Scheduling and quotas", default=10,
        doc="The highest priority a user without a team may ask for.")
    user_gpu_quota: int = _setting(
        env="PLATFORM_USER_GPU_QUOTA", group="Scheduling and quotas", default=4,
        doc="The GPUs a user without a team may hold at once.")
    user_cpu_slot_quota: int = _setting(
        env="PLATFORM_USER_CPU_SLOT_QUOTA", group="Scheduling and quotas", default=16,
        doc="The CPU slots a user without a team may hold at once (a team's own quota is "
            "`cpu_slot_quota`).")
    user_max_queued: int = _setting(
        env="PLATFORM_USER_MAX_QUEUED", group="Scheduling and quotas", default=100,
        doc="Training experiments one user may have queued at once, a search's included; a "
            "submission beyond is refused (0: no limit; a team may override it).")
    user_max_running: int = _setting(
        env="PLATFORM_USER_MAX_RUNNING", group="Scheduling and quotas", default=20,
        doc="Training experiments of one user the scheduler runs at once; more wait in the "
            "queue (0: no limit; a team may override it).")
    user_max_workspaces: int = _setting(
        env="PLATFORM_USER_MAX_WORKSPACES", group="Scheduling and quotas", default=2,
        doc="Workspace sessions one user may have queued or running at once; a start beyond is "
            "refused (0: no limit; a team may override it).")
    # Model serving
    model_allowed_ops: tuple[str, ...] = _setting(
        env="PLATFORM_MODEL_ALLOWED_OPS", group="Model serving", default=(),
        doc="Ops a served SavedModel may use beyond the inference allow-list (comma-separated).")
    tf_serving_grpc: str = _setting(env="TF_SERVING_GRPC", group="Model serving",
                                    default="127.0.0.1:8500",
                                    doc="The model server's gRPC address.")
    tf_serving_rest: str = _setting(env="TF_SERVING_REST", group="Model serving",
                                    default="http://127.0.0.1:8501",
                                    doc="The model server's REST address.")
    tf_serving_version: str = _setting(
        env="TF_SERVING_VERSION", group="Model serving", default="",
        default_doc="empty: the embedded server, the platform's own TensorFlow",
        doc="The TF Serving release of an external model server: publish refuses ops it lacks.")
    tf_serving_access_token: str = _setting(
        env="TF_SERVING_ACCESS_TOKEN", group="Model serving",
        default_doc="derived from the secret key",
        doc="What the embedded model server demands of every call.")
    tf_serving_front_refresh_seconds: float = _setting(
        env="TF_SERVING_FRONT_REFRESH_SECONDS", group="Model serving", default=5.0,
        doc="How often the platform pushes tokens and routes to the front (the embedded "
            "server's, or the gateway's), besides at each change (0: users reach models only "
            "through the web app).")
    tf_serving_front_grpc: str = _setting(
        env="TF_SERVING_FRONT_GRPC", group="Model serving", default="",
        default_doc="empty: the model server's own (TF_SERVING_GRPC)",
        doc="The front's gRPC address, which takes users' platform tokens: the embedded server, "
            "or the gateway (`python -m serving.gateway`) in front of stock TF Serving.")
    tf_serving_front_rest: str = _setting(
        env="TF_SERVING_FRONT_REST", group="Model serving", default="",
        default_doc="empty: the model server's own (TF_SERVING_REST)",
        doc="The front's REST address, where the platform pushes the access table (with "
            "TF_SERVING_ACCESS_TOKEN).")
    tf_serving_public_grpc: str = _setting(
        env="TF_SERVING_PUBLIC_GRPC", group="Model serving", default="",
        default_doc="empty: the front's",
        doc="The gRPC address users are shown for direct calls (behind a TLS proxy: its).")
    tf_serving_public_rest: str = _setting(
        env="TF_SERVING_PUBLIC_REST", group="Model serving", default="",
        default_doc="empty: the front's",
        doc="The REST address users are shown for direct calls (behind a TLS proxy: its).")
    tf_serving_front_max_age_seconds: float = _setting(
        env="TF_SERVING_FRONT_MAX_AGE_SECONDS", group="Model serving", default=60.0,
        doc="The front refuses platform tokens (UNAVAILABLE) when its last push is older.")
    tf_serving_grpc_max_message_bytes: int = _setting(
        env="TF_SERVING_GRPC_MAX_MESSAGE_BYTES", group="Model serving", default=64 * 2**20,
        doc="The largest gRPC message the embedded server takes.")
    tf_serving_metrics_path: str = _setting(
        env="TF_SERVING_METRICS_PATH", group="Model serving",
        default="/monitoring/prometheus/metrics",
        doc="The model server's Prometheus path on its REST port (empty: not scraped).")
    serving_health_sample_seconds: float = _setting(
        env="PLATFORM_SERVING_HEALTH_SAMPLE_SECONDS", group="Model serving", default=15.0,
        doc="How often the scheduler samples the model server's metrics.")
    model_versions_loaded: int = _setting(
        env="PLATFORM_MODEL_VERSIONS_LOADED", group="Model serving", default=3,
        doc="Versions of a model kept loaded besides its labelled ones.")
    model_server_confine: bool = _setting(
        env="PLATFORM_MODEL_SERVER_CONFINE", group="Model serving", default=True,
        doc="Confine the embedded server with Landlock to the model base path.")
    tf_serving_batching_parameters_file: str = _setting(
        env="TF_SERVING_BATCHING_PARAMETERS_FILE", group="Model serving", default="",
        doc="TF Serving's batching_parameters_file for the embedded server (empty: defaults).")
    tf_serving_intra_op_parallelism: int = _setting(
        env="TF_SERVING_INTRA_OP_PARALLELISM", group="Model serving", default=0,
        doc="The embedded server's intra-op threads (0: sized to the cores).")
    tf_serving_inter_op_parallelism: int = _setting(
        env="TF_SERVING_INTER_OP_PARALLELISM", group="Model serving", default=0,
        doc="The embedded server's inter-op threads (0: sized to the cores; -1: each request's "
            "ops run in its own thread, cheaper for small models unbatched, slower batched).")
    tf_serving_profiler_dir: str = _setting(
        env="TF_SERVING_PROFILER_DIR", group="Model serving", default="",
        doc="Where the embedded server's profiler writes traces (empty: profiler off).")
    max_predict_bytes: int = _setting(
        env="PLATFORM_MAX_PREDICT_BYTES", group="Model serving", default=8 * 1024 * 1024,
        doc="The largest inference request body.")
    # TensorBoard
    board_dir: Path = _setting(env="PLATFORM_TENSORBOARD_DIR", group="TensorBoard",
                               var="tensorboard", doc="Records of the hosted TensorBoards.")
    board_idle_seconds: float = _setting(
        env="PLATFORM_TENSORBOARD_IDLE_SECONDS", group="TensorBoard", default=900.0,
        doc="A TensorBoard without a request this long is stopped.")
    board_max: int = _setting(env="PLATFORM_TENSORBOARD_MAX", group="TensorBoard", default=8,
                              doc="TensorBoards running at once.")
    board_confine: bool = _setting(env="PLATFORM_TENSORBOARD_CONFINE", group="TensorBoard",
                                   default=True, doc="Confine TensorBoards with Landlock.")
    # Workspaces
    home_dir: Path = _setting(env="PLATFORM_HOME_DIR", group="Workspaces", var="homes",
                              doc="Users' persistent home volumes (one folder per user).")
    workspace_idle_minutes: float = _setting(
        env="PLATFORM_WORKSPACE_IDLE_MINUTES", group="Workspaces", default=60.0,
        doc="A session without kernel or terminal activity this long is stopped.")
    user_workspace_max_hours: float = _setting(
        env="PLATFORM_USER_WORKSPACE_MAX_HOURS", group="Workspaces", default=24.0,
        doc="The longest session of a user without a team.")
    workspace_api_url: str = _setting(
        env="PLATFORM_WORKSPACE_API_URL", group="Workspaces", default="http://127.0.0.1:8000",
        doc="The address a workspace's `tfp` reaches the platform at.")
    workspace_lab_origin: str = _setting(
        env="PLATFORM_WORKSPACE_LAB_ORIGIN", group="Workspaces", default="",
        doc="Where /workspaces/<id>/lab/ is served (empty: this origin).")
    workspace_relay_port: int = _setting(
        env="PLATFORM_WORKSPACE_RELAY_PORT", group="Workspaces", default=0,
        doc="Port every worker node relays its workspaces' Jupyter on, on its --address, for a "
            "lab on another machine (0: the lab reaches them through their Unix sockets, on "
            "its own machine only).")
    # API and security
    lookup_cache_seconds: float = _setting(
        env="PLATFORM_LOOKUP_CACHE_SECONDS", group="API and security", default=1.0,
        doc="How long a web process trusts a checked API token and a model's routing.")
    api_token_days: int = _setting(env="PLATFORM_API_TOKEN_DAYS", group="API and security",
                                   default=90, doc="An API token's default lifetime in days.")
    # Single sign-on (accounts/oidc.py; docs/operations/single-sign-on.md)
    oidc_issuer: str = _setting(
        env="PLATFORM_OIDC_ISSUER", group="Single sign-on", default="",
        doc="The OpenID Connect provider's issuer URL; its discovery document gives the "
            "endpoints (empty: single sign-on off, local accounts only).")
    oidc_provider_name: str = _setting(
        env="PLATFORM_OIDC_PROVIDER_NAME", group="Single sign-on", default="",
        default_doc="the issuer's host",
        doc="What the login page's \"Sign in with …\" button names.")
    oidc_client_id: str = _setting(env="PLATFORM_OIDC_CLIENT_ID", group="Single sign-on",
                                   default="", doc="The platform's client id at the provider.")
    oidc_client_secret: str = _setting(
        env="PLATFORM_OIDC_CLIENT_SECRET", group="Single sign-on", default="",
        doc="The client's secret (as PLATFORM_OIDC_CLIENT_SECRET_FILE: a secret file).")
    oidc_scopes: tuple[str, ...] = _setting(
        env="PLATFORM_OIDC_SCOPES", group="Single sign-on", default=("openid", "email", "profile"),
        default_doc="`openid,email,profile`",
        doc="Scopes asked for (comma-separated); add the one that releases the groups claim "
            "where the provider needs one (Okta: `groups`).")
    oidc_sign_algorithm: str = _setting(
        env="PLATFORM_OIDC_SIGN_ALGORITHM", group="Single sign-on", default="RS256",
        doc="The algorithm the provider signs ID tokens with (checked against its JWKS).")
    oidc_groups_claim: str = _setting(
        env="PLATFORM_OIDC_GROUPS_CLAIM", group="Single sign-on", default="groups",
        doc="The claim listing the user's groups, read at every sign-in (empty: teams are set "
            "by staff, and no group is required).")
    oidc_group_teams: tuple[str, ...] = _setting(
        env="PLATFORM_OIDC_GROUP_TEAMS", group="Single sign-on", default=(),
        default_doc="empty: a group that names an existing team",
        doc="`group=team` pairs (comma-separated): the first pair whose group the user is in "
            "names their team, created if missing; in none of them, no team.")
    oidc_allowed_groups: tuple[str, ...] = _setting(
        env="PLATFORM_OIDC_ALLOWED_GROUPS", group="Single sign-on", default=(),
        doc="Groups whose members may sign in (comma-separated); a user in none of them is "
            "refused and deactivated, their API tokens revoked (empty: anyone the provider "
            "signs in).")
    oidc_create_users: bool = _setting(
        env="PLATFORM_OIDC_CREATE_USERS", group="Single sign-on", default=True,
        doc="Create an account at a user's first sign-in (false: staff create it and link its "
            "provider identity in the admin).")
    oidc_recheck_seconds: int = _setting(
        env="PLATFORM_OIDC_RECHECK_SECONDS", group="Single sign-on", default=900,
        doc="How often a web session signed in with the provider is checked with it again "
            "(silently, groups and team included); a refusal ends the session.")
    # Monitoring
    metrics_token: str = _setting(
        env="PLATFORM_METRICS_TOKEN", group="Monitoring", default="",
        doc="Bearer token a scraper sends to /metrics (empty: nobody may scrape).")
    metrics_admission_window_seconds: int = _setting(
        env="PLATFORM_METRICS_ADMISSION_WINDOW_SECONDS", group="Monitoring", default=3600,
        doc="tfplatform_admission_wait_seconds covers trials started within this long.")
    celery_metrics_port: int = _setting(
        env="PLATFORM_CELERY_METRICS_PORT", group="Monitoring", default=0,
        doc="Port Celery workers serve their task metrics on (0: not served).")
    celery_metrics_address: str = _setting(
        env="PLATFORM_CELERY_METRICS_ADDRESS", group="Monitoring", default="127.0.0.1",
        doc="Address Celery workers serve their task metrics on.")
    liveness_file: str = _setting(
        env="PLATFORM_LIVENESS_FILE", group="Monitoring", default="",
        doc="A file Celery workers and the scheduler touch every 30 s while they work, for a "
            "container health check (empty: none).")
    # Notifications (notifications/; docs/user-guide/notifications.md)
    webhook_allowed_networks: tuple[str, ...] = _setting(
        env="PLATFORM_WEBHOOK_ALLOWED_NETWORKS", group="Notifications", default=(),
        doc="Networks (CIDRs, comma-separated) webhooks may reach although they are private, "
            "loopback or link-local; every other such address is refused.")
    webhook_connect_timeout_seconds: float = _setting(
        env="PLATFORM_WEBHOOK_CONNECT_TIMEOUT_SECONDS", group="Notifications", default=3.0,
        doc="How long a webhook delivery waits to connect.")
    webhook_read_timeout_seconds: float = _setting(
        env="PLATFORM_WEBHOOK_READ_TIMEOUT_SECONDS", group="Notifications", default=10.0,
        doc="How long a webhook delivery waits for each read of the answer.")
    webhook_ca_bundle: str = _setting(
        env="PLATFORM_WEBHOOK_CA_BUNDLE", group="Notifications", default="",
        doc="CA certificates webhooks' TLS is verified against (empty: certifi's).")
    notification_attempts: int = _setting(
        env="PLATFORM_NOTIFICATION_ATTEMPTS", group="Notifications", default=6,
        doc="Attempts of one delivery (webhook or email) before it is marked failed.")
    notification_retry_seconds: float = _setting(
        env="PLATFORM_NOTIFICATION_RETRY_SECONDS", group="Notifications", default=30.0,
        doc="The wait before a failed delivery's second attempt; it doubles at each attempt.")
    notification_retry_max_seconds: float = _setting(
        env="PLATFORM_NOTIFICATION_RETRY_MAX_SECONDS", group="Notifications", default=3600.0,
        doc="The longest wait between two attempts of a delivery.")
    notification_log_days: int = _setting(
        env="PLATFORM_NOTIFICATION_LOG_DAYS", group="Notifications", default=30,
        doc="Deliveries and their attempts are kept this many days.")


def _value_read(*, env: environ.Env, name: str, kind: Any, default: Any) -> Any:
    """Reads one variable as `kind` (the field's type), as the settings dict did before."""
    optional = isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind)
    if optional:
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        raw = env.list(name, default=[str(value) for value in default])
        return tuple(item(value) for value in raw)
    readers: dict[Any, Callable[..., Any]] = {
        str: env.str, int: env.int, float: env.float, bool: env.bool}
    if kind is Path:
        return Path(env.str(name, default=str(default)))
    return readers[kind](name, default=default)


def platform_settings_from_env(*, env: environ.Env, var_dir: Path,
                               secret_key: str) -> PlatformSettings:
    """Builds the settings once, at start-up: each field from its variable, else its default."""
    hints = typing.get_type_hints(PlatformSettings)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(PlatformSettings):
        meta = field.metadata
        if meta["env"] is None:
            continue
        if meta["var"] is not None:
            default: Any = var_dir / meta["var"]
            if typing.get_origin(hints[field.name]) is tuple:
                default = (default,)
        elif field.default is not dataclasses.MISSING:
            default = field.default
        elif field.name == "tf_serving_access_token":
            # Given, or (also when empty) derived from the secret key, so the web app and the
            # model server agree with nothing more kept (serving/access.py).
            from serving.access import access_token_derive

            values[field.name] = (env.str(meta["env"], default="")
                                  or access_token_derive(secret=secret_key))
            continue
        else:
            default = socket.gethostname() if field.name == "node_name" else field.default
        values[field.name] = _value_read(env=env, name=meta["env"], kind=hints[field.name],
                                         default=default)
    built = PlatformSettings(**values)
    _serving_version_check(version=built.tf_serving_version)
    _task_ports_check(base=built.task_port_base, span=built.task_port_span)
    _webhook_networks_check(networks=built.webhook_allowed_networks)
    _oidc_check(config=built)
    return built


def _webhook_networks_check(*, networks: tuple[str, ...]) -> None:
    """A misspelt range would otherwise refuse every webhook to it at delivery: stop the start."""
    import ipaddress

    for network in networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError as error:
            raise ImproperlyConfigured(
                f"PLATFORM_WEBHOOK_ALLOWED_NETWORKS: {network!r} is not a network ({error}).",
            ) from error


def _task_ports_check(*, base: int, span: int) -> None:
    """Ports past 65535 would fail only once a gang spanned nodes: stop the start instead."""
    if span < 1 or base < 1024 or base + 2 * span > 65536:
        raise ImproperlyConfigured(
            f"PLATFORM_TASK_PORT_BASE={base} and PLATFORM_TASK_PORT_SPAN={span}: the ports of "
            "tasks, [base, base + 2 * span), must lie within 1024-65535.")


def _oidc_check(*, config: PlatformSettings) -> None:
    """Single sign-on half configured would fail only when someone signs in: stop the start."""
    if not config.oidc_issuer:
        return
    issuer = urlsplit(config.oidc_issuer)
    loopback = issuer.hostname in ("localhost", "127.0.0.1", "::1")
    if issuer.scheme != "https" and not (issuer.scheme == "http" and loopback):
        raise ImproperlyConfigured(
            f"PLATFORM_OIDC_ISSUER={config.oidc_issuer!r}: an issuer is an https:// URL (http:// "
            "only on this machine, for development).")
    if not config.oidc_client_id or not config.oidc_client_secret:
        raise ImproperlyConfigured("PLATFORM_OIDC_ISSUER is set: PLATFORM_OIDC_CLIENT_ID and "
                                   "PLATFORM_OIDC_CLIENT_SECRET are needed too.")
    if config.oidc_allowed_groups and not config.oidc_groups_claim:
        raise ImproperlyConfigured("PLATFORM_OIDC_ALLOWED_GROUPS needs a groups claim to check "
                                   "them in (PLATFORM_OIDC_GROUPS_CLAIM).")
    for pair in config.oidc_group_teams:
        group, _, team = pair.partition("=")
        if not group.strip() or not team.strip() or len(team.strip()) > TEAM_NAME_MAX:
            raise ImproperlyConfigured(
                f"PLATFORM_OIDC_GROUP_TEAMS: {pair!r} is not `group=team` (a team's name has 1 "
                f"to {TEAM_NAME_MAX} characters).")


def _serving_version_check(*, version: str) -> None:
    """A version whose ops are not known would let any export through: stop the start."""
    if not version:
        return
    from serving.serving_ops import serving_ops

    try:
        serving_ops(version=version)
    except ValueError as error:
        raise ImproperlyConfigured(f"TF_SERVING_VERSION: {error}.") from error




def _type_name(kind: Any) -> str:
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).replace("pathlib.", "").replace("NoneType", "None")


def _default_shown(field: dataclasses.Field[Any]) -> str:
    meta = field.metadata
    if meta["var"] is not None:
        return f"`var/{meta['var']}`"
    if meta["default_doc"] is not None:
        return str(meta["default_doc"])
    value = field.default
    if value == "" or value == ():
        return "empty"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def settings_table_render() -> str:
    """The configuration page's table (docs/operations/configuration-table.md), one section per
    group: what `manage.py settings_table` writes and a test compares with the committed file."""
    hints = typing.get_type_hints(PlatformSettings)
    lines = ["<!-- Generated from PlatformSettings by `manage.py settings_table`: do not edit. -->",
             "", "# Settings reference", "",
             "The platform's own settings, each read once at start-up from its environment",
             "variable (`settings.PLATFORM`). `var/…` defaults lie under `PLATFORM_VAR_DIR`.", ""]
    fields = dataclasses.fields(PlatformSettings)
    for group in GROUPS:
        lines += [f"### {group}", "", "| variable | type | default | meaning |",
                  "|---|---|---|---|"]
        for field in fields:
            meta = field.metadata
            if meta["group"] != group:
                continue
            variable = f"`{meta['env']}`" if meta["env"] else f"fixed (`{field.name}`)"
            doc = str(meta["doc"]).replace("|", "\\|")
            lines.append(f"| {variable} | `{_type_name(hints[field.name])}` | "
                         f"{_default_shown(field)} | {doc} |")
        lines.append("")
    return "\n".join(lines)
