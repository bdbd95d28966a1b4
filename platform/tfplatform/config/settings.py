"""Django settings, read from the environment (django-environ).

Embedded defaults (SQLite, a filesystem Celery broker, the embedded model server) let
`make run` start on a bare machine; DATABASE_URL, CELERY_BROKER_URL, CACHE_URL and
TF_SERVING_GRPC/TF_SERVING_REST switch to production services.
"""

import contextlib
import os
import secrets
import socket
from datetime import timedelta
from pathlib import Path

import environ

ROOT_DIR = Path(__file__).resolve().parents[3]
env = environ.Env()

# Relative to the repository (an absolute path wins): the test suite uses var/test, so a `make run`
# in the same checkout never shares its database, broker folders or models with the tests.
VAR_DIR = ROOT_DIR / env.str("PLATFORM_VAR_DIR", default="var")
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _private_file_create(path: Path) -> None:
    """Creates `path` empty and 0600 unless it exists: never readable by others for a moment."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))


def _secret_key() -> str:
    if key := env.str("DJANGO_SECRET_KEY", default=""):
        return key
    # A per-installation key kept under var/ so sessions survive restarts of `make run`.
    path = VAR_DIR / "secret_key"
    staged = VAR_DIR / f".secret_key.{os.getpid()}"
    if not path.exists():
        _private_file_create(staged)
        staged.write_text(secrets.token_urlsafe(64))
        # Appears whole; a racing process that lost the link reads the winner's key.
        with contextlib.suppress(FileExistsError):
            os.link(staged, path)
        staged.unlink()
    return path.read_text().strip()


def _serving_token() -> str:
    """What the embedded model server demands of every call (serving/access.py): given, or
    derived from the secret key, so the web app and the server agree with nothing more kept."""
    if token := env.str("TF_SERVING_ACCESS_TOKEN", default=""):
        return token
    from serving.access import access_token_derive

    return access_token_derive(secret=SECRET_KEY)


SECRET_KEY = _secret_key()
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    # Request, response and database metrics of the web process (tfplatform.monitoring serves them).
    "django_prometheus",
    "tfplatform.core",
    "tfplatform.accounts",
    "tfplatform.cluster",
    "tfplatform.datasets",
    "tfplatform.experiments",
    "tfplatform.modelregistry",
    "tfplatform.searches",
    "tfplatform.monitoring",
    "tfplatform.web",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",  # first: times the whole request
    "django.middleware.security.SecurityMiddleware",
    "tfplatform.core.middleware.NulRefusingMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "tfplatform.core.pages.PlatformErrorPagesMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # answers a locked-out sign-in with 429
    "django_prometheus.middleware.PrometheusAfterMiddleware",  # last: sees every response
]

# Repeated failed sign-ins (the login page, the admin's, the API token endpoint) lock that
# username out from that client address for a while (django-axes).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("PLATFORM_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("PLATFORM_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "tfplatform.core.client.client_address"
AXES_VERBOSE = False

ROOT_URLCONF = "tfplatform.config.urls"
WSGI_APPLICATION = "tfplatform.config.wsgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment-list"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [ROOT_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    if os.path.isabs(DATABASES["default"]["NAME"]):  # not ":memory:"
        # SQLite creates the file (and its -wal and -shm, as the file is) 0644 otherwise.
        _private_file_create(Path(DATABASES["default"]["NAME"]))
    # A file, not memory, so the test suite's worker and scheduler processes share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3")}
    # Several processes (web, worker, scheduler) share the file: wait for locks, don't fail.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
# Persistent connections: opening one (and, on SQLite, setting its journal mode) cost more
# than the queries of an inference request (bench/inference.py).
DATABASES["default"].setdefault("CONN_MAX_AGE", 60)
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
# django-prometheus's wrappers of the same backends count queries, errors and their latency.
_DB_BACKENDS = {
    "django.db.backends.postgresql": "django_prometheus.db.backends.postgresql",
    "django.db.backends.sqlite3": "django_prometheus.db.backends.sqlite3",
}
DATABASES["default"]["ENGINE"] = _DB_BACKENDS.get(DATABASES["default"]["ENGINE"],
                                                  DATABASES["default"]["ENGINE"])
# Its migrations gauge would query the database whenever Django starts, before `migrate` too.
PROMETHEUS_EXPORT_MIGRATIONS = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}
# Processes that share one cache server but must not see each other's keys (the test suite's
# xdist workers) each get a prefix of their own.
if _cache_prefix := env.str("PLATFORM_CACHE_KEY_PREFIX", default=""):
    CACHES["default"]["KEY_PREFIX"] = _cache_prefix

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    {"NAME": "tfplatform.accounts.passwords.TokensRevokedOnPasswordChange"},
]

if env.bool("PLATFORM_FAST_PASSWORD_HASHING", default=False):
    # Test suites only: real hashing costs ~0.5 s per login attempt.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [ROOT_DIR / "platform" / "static"]
_static_backend = (
    "whitenoise.storage.CompressedManifestStaticFilesStorage"
    if env.bool("DJANGO_STATIC_MANIFEST", default=not DEBUG)
    else "django.contrib.staticfiles.storage.StaticFilesStorage"
)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": _static_backend},
}
# Without a collected manifest (development, tests) whitenoise serves straight from the finders.
WHITENOISE_USE_FINDERS = "Manifest" not in _static_backend
# Uploads; under a container runtime in compose, a path the same on the host and in the worker.
MEDIA_ROOT = Path(env.str("PLATFORM_MEDIA_ROOT", default=str(VAR_DIR / "uploads")))
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("PLATFORM_MAX_REQUEST_BYTES", default=10 * 1024 * 1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
FILE_UPLOAD_HANDLERS = [
    "tfplatform.core.uploads.BoundedUploadHandler",  # first: refuses before anything is kept
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# Security: `manage.py check --deploy --fail-level WARNING` passes with DJANGO_DEBUG off.
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SECURE_REFERRER_POLICY = "same-origin"
if env.bool("DJANGO_SECURE", default=not DEBUG):
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
    CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
    # Prometheus scrapes the web app directly on the internal network, in plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
    if env.bool("DJANGO_BEHIND_TLS_PROXY", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

REST_FRAMEWORK = {
    # How many proxies of ours put an address in X-Forwarded-For; 0 (no proxy): the socket's
    # peer, so a client cannot pick its own throttle bucket by sending the header.
    "NUM_PROXIES": env.int("PLATFORM_NUM_PROXIES", default=0),
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tfplatform.accounts.authentication.CachedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "tfplatform.core.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "tfplatform.core.api.exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "auth": env.str("PLATFORM_THROTTLE_AUTH", default="20/min"),
        "inference": env.str("PLATFORM_THROTTLE_INFERENCE", default="6000/min"),
    },
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "TensorFlow training-and-serving platform API",
    "DESCRIPTION": "Launch, watch and deploy TensorFlow experiments; TF Serving-style inference.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI is served from our own static files: nothing loads from a CDN at run time.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Experiment and ExperimentDetail share the experiment's states: one enum, its usual name.
    "ENUM_NAME_OVERRIDES": {
        "ExperimentStateEnum": "tfplatform.experiments.models.Experiment.State",
        "SearchStateEnum": "tfplatform.searches.models.Search.State",
        "SearcherEnum": "tfplatform.searches.models.Search.Searcher",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "tfplatform.core.schema.schema_errors_document",
    ],
}

# Celery: a message is acknowledged when a worker takes it, and the database, not the broker,
# is what makes work happen again: the scheduler sends a trial that no node took up once more
# (trials_dispatch_overdue), a node claims its part of a trial once, a lost node's trials are
# failed and requeued, and the model loader takes up versions left loading when it starts.
# Late acknowledgement would add nothing but a copy of every trial longer than the broker's
# visibility timeout, and with kombu 5.7 a worker holding an unacknowledged message dies when
# the Redis connection drops (it restores the message through a connection already gone).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _folder in ("processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        # Remote-control (pidbox) exchanges would otherwise land in the current directory.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # A message a worker took but never acknowledged (it died in between) goes to another after
    # this long. Messages are acknowledged on receipt, so a long trial is never sent twice.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env.int("PLATFORM_BROKER_VISIBILITY_TIMEOUT", default=3600),
    }
    # How often a worker looks for such overdue messages; unset, kombu's own pace (a look
    # every 10th tick of 10 s). Set, a look every that many seconds.
    if _restore := env.int("PLATFORM_BROKER_RESTORE_SECONDS", default=0):
        CELERY_BROKER_TRANSPORT_OPTIONS |= {"unacked_restore_interval": _restore,
                                            "unacked_restore_throttle": 1}
    # Platforms that share one Redis but must not take each other's tasks (the test suite's
    # xdist workers) each get a prefix of their own for every key and channel.
    if _broker_prefix := env.str("PLATFORM_BROKER_KEY_PREFIX", default=""):
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = f"{_broker_prefix}:"
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "platform"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = False

PLATFORM = {
    "NODE_NAME": env.str("PLATFORM_NODE_NAME", default=socket.gethostname()),
    "NODE_ADDRESS": env.str("PLATFORM_NODE_ADDRESS", default="127.0.0.1"),
    "MODEL_BASE_PATH": Path(env.str("MODEL_BASE_PATH", default=str(VAR_DIR / "models"))),
    # The largest multipart request (its files together): above the largest single upload, a
    # model zip of 500 MiB; refused while it is read (core/uploads.py).
    "MAX_UPLOAD_BYTES": env.int("PLATFORM_MAX_UPLOAD_BYTES", default=520 * 2**20),
    # Operations a served SavedModel may use beyond the graph check's allow-list of inference
    # ops (serving/allowed_ops.py), e.g. InitializeTableFromTextFileV2 for vocabulary assets.
    "MODEL_ALLOWED_OPS": env.list("PLATFORM_MODEL_ALLOWED_OPS", default=[]),
    # The one folder staff may register SavedModels from by path (nothing else on the server).
    "MODEL_IMPORT_DIR": Path(env.str("PLATFORM_MODEL_IMPORT_DIR",
                                     default=str(VAR_DIR / "import"))),
    "DATASETS_DIR": Path(env.str("DATASETS_DIR", default=str(VAR_DIR / "datasets"))),
    # The only folders a registered (sharded) dataset may live in: its folder is shown,
    # read-only, to the trials that use it. Staff choose them; comma-separated.
    "DATASET_ROOTS": [Path(root) for root in env.list(
        "PLATFORM_DATASET_ROOTS", default=[str(VAR_DIR / "data")])],
    # Modules and datasets referenced by path must live here (staff put them in place).
    "SHARED_DIR": Path(env.str("PLATFORM_SHARED_DIR", default=str(VAR_DIR / "shared"))),
    "WORK_DIR": Path(env.str("PLATFORM_WORK_DIR", default=str(VAR_DIR / "work"))),
    # The supervisor's own files of each attempt (spec, events, task logs): never mounted
    # writable into a trial, so a trial cannot plant a symlink the supervisor then follows.
    "RUN_DIR": Path(env.str("PLATFORM_RUN_DIR", default=str(VAR_DIR / "runs"))),
    # TensorBoard processes the web app runs for experiments (experiments/boards.py): their
    # records, how long one may go without a request, how many at once, and Landlock for them.
    "BOARD_DIR": Path(env.str("PLATFORM_TENSORBOARD_DIR", default=str(VAR_DIR / "tensorboard"))),
    "BOARD_IDLE_SECONDS": env.float("PLATFORM_TENSORBOARD_IDLE_SECONDS", default=900.0),
    "BOARD_MAX": env.int("PLATFORM_TENSORBOARD_MAX", default=8),
    "BOARD_CONFINE": env.bool("PLATFORM_TENSORBOARD_CONFINE", default=True),
    # Per-node virtualenvs of environments (sandbox runtime), one per content hash.
    "ENVIRONMENTS_DIR": Path(
        env.str("PLATFORM_ENVIRONMENTS_DIR", default=str(VAR_DIR / "environments"))
    ),
    # How trials are isolated on this node: "sandbox" (bubblewrap + Landlock, the default),
    # "docker" or "podman" (a container of the environment's image per task), or "process"
    # (no isolation: development only, and flagged wherever trials show).
    "TRIAL_RUNTIME": env.str("PLATFORM_TRIAL_RUNTIME", default="sandbox"),
    # The highest Landlock ABI tasks are confined with (empty: what the kernel offers; 0: off,
    # as on a kernel without it). Namespaces and seccomp are the wall either way.
    "LANDLOCK_ABI": env.int("PLATFORM_LANDLOCK_ABI", default=None),
    # A gang across nodes on a node run as root (sandbox runtime): a network namespace of its
    # own per node, given a /30 of this pool, reaching only its peers (training/gang_network.py;
    # the node turns on IPv4 forwarding). Empty: the node's network, narrowed by Landlock.
    "GANG_SUBNET": env.str("PLATFORM_GANG_SUBNET", default="100.64.0.0/16"),
    # Under "docker"/"podman": the engine's API (podman: `podman system service`), the OCI
    # runtime to ask for (empty: the engine's default), and each task's limits per device slot
    # it holds (memory 0: the node's divided by its slots; CPUs 0: no quota, a weight only).
    "CONTAINER_ENGINE_URL": env.str("PLATFORM_CONTAINER_ENGINE_URL", default=""),
    "CONTAINER_OCI_RUNTIME": env.str("PLATFORM_CONTAINER_OCI_RUNTIME", default=""),
    # Warm containers and trials without an environment: empty, the node's own runtime image.
    "CONTAINER_IMAGE": env.str("PLATFORM_CONTAINER_IMAGE", default=""),
    "CONTAINER_MEMORY_MB": env.int("PLATFORM_CONTAINER_MEMORY_MB", default=0),
    "CONTAINER_CPUS": env.float("PLATFORM_CONTAINER_CPUS", default=0.0),
    "CONTAINER_PIDS": env.int("PLATFORM_CONTAINER_PIDS", default=4096),
    # A gang across nodes: "host" (nodes on several machines; the host's network, narrowed by
    # Landlock to its ports) or "gang" (all nodes use one engine, as in compose: an internal
    # network of the gang's own).
    "CONTAINER_GANG_NETWORK": env.str("PLATFORM_CONTAINER_GANG_NETWORK", default="host"),
    # Where a workspace's container reaches the API for its `tfp` (WORKSPACE_API_URL): "relay"
    # (no network: the node's relay socket, as a sandbox does), "host" (narrowed by Landlock to
    # the API's port) or a network only the web app is on (compose's `workspace-api`).
    "CONTAINER_WORKSPACE_NETWORK": env.str("PLATFORM_CONTAINER_WORKSPACE_NETWORK",
                                           default="relay"),
    "TF_SERVING_GRPC": env.str("TF_SERVING_GRPC", default="127.0.0.1:8500"),
    "TF_SERVING_ACCESS_TOKEN": _serving_token(),
    # The largest gRPC message the embedded server takes (TF Serving's own default: 2 GB).
    "TF_SERVING_GRPC_MAX_MESSAGE_BYTES": env.int("TF_SERVING_GRPC_MAX_MESSAGE_BYTES",
                                                 default=64 * 2**20),
    "TF_SERVING_REST": env.str("TF_SERVING_REST", default="http://127.0.0.1:8501"),
    # Where the model server serves its Prometheus metrics on the REST port (the embedded one
    # is started with a --monitoring_config_file naming it); the scheduler scrapes it every
    # SERVING_HEALTH_SAMPLE_SECONDS for the models page's serving health. Empty: neither.
    "TF_SERVING_METRICS_PATH": env.str("TF_SERVING_METRICS_PATH",
                                       default="/monitoring/prometheus/metrics"),
    "SERVING_HEALTH_SAMPLE_SECONDS": env.float("PLATFORM_SERVING_HEALTH_SAMPLE_SECONDS",
                                               default=15.0),
    # What one user's uploads and model versions may take on disk (0: no limit; staff: none).
    "USER_STORAGE_QUOTA_MB": env.int("PLATFORM_USER_STORAGE_QUOTA_MB", default=20 * 1024),
    # Versions of a model kept loaded besides its labelled ones; older ones are unloaded.
    "MODEL_VERSIONS_LOADED": env.int("PLATFORM_MODEL_VERSIONS_LOADED", default=3),
    # The embedded server reads only the model base path and the runtime (Landlock).
    "MODEL_SERVER_CONFINE": env.bool("PLATFORM_MODEL_SERVER_CONFINE", default=True),
    # TF Serving's batching_parameters_file for the embedded server; empty: its defaults.
    "TF_SERVING_BATCHING_PARAMETERS_FILE": env.str("TF_SERVING_BATCHING_PARAMETERS_FILE",
                                                   default=""),
    # TF Serving's --tensorflow_intra_op_parallelism / --tensorflow_inter_op_parallelism for the
    # embedded server (compose passes them to tensorflow/serving). 0: TensorFlow's thread pools
    # sized to the cores. Small models on few cores answer sooner with intra 1 and inter -1:
    # a request's ops run in the thread serving it, with no hand-off to a pool (bench item 3).
    "TF_SERVING_INTRA_OP_PARALLELISM": env.int("TF_SERVING_INTRA_OP_PARALLELISM", default=0),
    "TF_SERVING_INTER_OP_PARALLELISM": env.int("TF_SERVING_INTER_OP_PARALLELISM", default=0),
    # Where the embedded server's profiler service may write traces (its only writable
    # directory when confined); empty: the profiler service is off.
    "TF_SERVING_PROFILER_DIR": env.str("TF_SERVING_PROFILER_DIR", default=""),
    "HEARTBEAT_SECONDS": env.float("PLATFORM_HEARTBEAT_SECONDS", default=5.0),
    # A node with less free space under WORK_DIR or RUN_DIR gets no new trials until an operator
    # frees some (like the kubelet's disk pressure); a trial that fills it fails retryably.
    "WORK_DISK_MIN_FREE_MB": env.int("PLATFORM_WORK_DISK_MIN_FREE_MB", default=256),
    "NODE_LOST_SECONDS": env.float("PLATFORM_NODE_LOST_SECONDS", default=30.0),
    # A held GPU whose measured (NVML) utilization stayed ~0 this long is flagged idle on the
    # cluster page; emulated devices are never measured, so never idle.
    "IDLE_GPU_MINUTES": env.float("PLATFORM_IDLE_GPU_MINUTES", default=30.0),
    # The scheduler's own loop is the safety net (lost nodes, drained nodes, a missed wake-up):
    # submissions, ended trials and nodes becoming ready wake a pass at once (scheduler_wake),
    # so the loop can idle without costing the cores that train.
    "SCHEDULER_INTERVAL_SECONDS": env.float("PLATFORM_SCHEDULER_INTERVAL", default=5.0),
    # A trial no node took up within this long after its dispatch is sent again (a broker that
    # restarted without persistence lost its messages; a duplicate is dropped by the node).
    "DISPATCH_RETRY_SECONDS": env.float("PLATFORM_DISPATCH_RETRY_SECONDS", default=60.0),
    # Accelerator slots declared for this node; for CPU-only machines each is a logical CPU device.
    "DECLARED_GPU_SLOTS": env.int("PLATFORM_GPU_SLOTS", default=0),
    # Task processes per node kept ready with TensorFlow imported (0 turns the warm start off).
    "WARM_TRIAL_PROCESSES": env.int("PLATFORM_WARM_TRIAL_PROCESSES", default=1),
    # Ports of TF tasks in gangs spanning nodes: [base, base + 2 * span), below Linux's
    # ephemeral range so outgoing connections never hold them.
    "TASK_PORT_BASE": env.int("PLATFORM_TASK_PORT_BASE", default=20000),
    "TASK_PORT_SPAN": 5000,
    # A user without a team: the highest priority they may ask for, and the GPUs they may hold
    # at once (a team's own limits are on the team).
    "USER_MAX_PRIORITY": env.int("PLATFORM_USER_MAX_PRIORITY", default=10),
    "USER_GPU_QUOTA": env.int("PLATFORM_USER_GPU_QUOTA", default=4),
    "MAX_WORKERS": 64,
    "MAX_GPUS_PER_WORKER": 16,
    "MAX_PARAMETER_SERVERS": 16,
    "MAX_PREDICT_BYTES": env.int("PLATFORM_MAX_PREDICT_BYTES", default=8 * 1024 * 1024),
    # How long a web process trusts a checked API token and a model's routing (labels, canary
    # share) without asking the database again: a deleted token, a moved label or a new canary
    # share reaches every web process within this time.
    "LOOKUP_CACHE_SECONDS": env.float("PLATFORM_LOOKUP_CACHE_SECONDS", default=1.0),
    # How long an API token lives unless its owner asks for less (1 to 365 days).
    "API_TOKEN_DAYS": env.int("PLATFORM_API_TOKEN_DAYS", default=90),
    # /metrics (tfplatform.monitoring): a scraper sends this bearer token from wherever it is
    # (empty: nobody may scrape).
    "METRICS_TOKEN": env.str("PLATFORM_METRICS_TOKEN", default=""),
    # tfplatform_admission_wait_seconds covers trials that started within this long.
    "METRICS_ADMISSION_WINDOW_SECONDS": env.int("PLATFORM_METRICS_ADMISSION_WINDOW_SECONDS",
                                                default=3600),
    # Celery workers serve their task metrics here when set (0: not served).
    "CELERY_METRICS_PORT": env.int("PLATFORM_CELERY_METRICS_PORT", default=0),
    "CELERY_METRICS_ADDRESS": env.str("PLATFORM_CELERY_METRICS_ADDRESS", default="127.0.0.1"),
    # Workspaces: each user's persistent home volume (one folder per user), how long a session
    # may go without kernel or terminal activity before it is stopped, a user without a team's
    # longest session, and the address a workspace's `tfp` reaches the platform at.
    "HOME_DIR": Path(env.str("PLATFORM_HOME_DIR", default=str(VAR_DIR / "homes"))),
    "WORKSPACE_IDLE_MINUTES": env.float("PLATFORM_WORKSPACE_IDLE_MINUTES", default=60.0),
    "USER_WORKSPACE_MAX_HOURS": env.float("PLATFORM_USER_WORKSPACE_MAX_HOURS", default=24.0),
    "WORKSPACE_API_URL": env.str("PLATFORM_WORKSPACE_API_URL", default="http://127.0.0.1:8000"),
    # Where `/workspaces/<id>/lab/` is served (the ASGI `lab` process): empty, this origin
    # (a TLS proxy routes the path there); `make run` gives the lab process a port of its own.
    "WORKSPACE_LAB_ORIGIN": env.str("PLATFORM_WORKSPACE_LAB_ORIGIN", default=""),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("PLATFORM_LOG_LEVEL", default="INFO")},
}
