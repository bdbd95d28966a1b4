"""Django settings, read from the environment (django-environ; any variable also as NAME_FILE).

Embedded defaults (SQLite, a filesystem Celery broker, the embedded model server) let
`make run` start on a bare machine; DATABASE_URL, CELERY_BROKER_URL, CACHE_URL and
TF_SERVING_GRPC/TF_SERVING_REST switch to production services.
"""

import contextlib
import os
import secrets
from datetime import timedelta
from pathlib import Path

from kombu.transport import TRANSPORT_ALIASES

from tfplatform.config.credentials import redis_url_with_password, url_with_password
from tfplatform.config.platform_settings import platform_settings_from_env
from tfplatform.core.environment import platform_env

ROOT_DIR = Path(__file__).resolve().parents[3]
# Any variable may be given as NAME_FILE, a file holding its value (core/environment.py).
env = platform_env()

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
    "tfplatform.audit",
    "tfplatform.accounts",
    "tfplatform.cluster",
    "tfplatform.notifications",
    "tfplatform.datasets",
    "tfplatform.experiments",
    "tfplatform.workspaces",
    "tfplatform.modelregistry",
    "tfplatform.searches",
    "tfplatform.monitoring",
    "tfplatform.operations",
    "tfplatform.web",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",  # first: times the whole request
    "django.middleware.security.SecurityMiddleware",
    "tfplatform.core.middleware.NulRefusingMiddleware",
    # The request's client address for the audit log (tfplatform.audit).
    "tfplatform.audit.middleware.AuditRequestMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Single sign-on: a session the OpenID provider signed in is checked with it again now and
    # then (accounts/oidc.py; stands aside while PLATFORM_OIDC_ISSUER is unset).
    "tfplatform.accounts.oidc.OidcSessionRefresh",
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
    "tfplatform.accounts.oidc.OidcBackend",  # OpenID Connect, when PLATFORM_OIDC_ISSUER is set
]
AXES_FAILURE_LIMIT = env.int("PLATFORM_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("PLATFORM_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "tfplatform.core.client.client_address"
AXES_VERBOSE = False
# The OpenID provider's callback carries no username and counts its own failures.
AXES_WHITELIST_CALLABLE = "tfplatform.accounts.oidc.sign_in_lockout_exempt"

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

# The services' passwords may come apart from their URLs (DATABASE_PASSWORD, REDIS_PASSWORD,
# or as *_FILE): compose hands them over as secret files and keeps the URLs plain.
_REDIS_PASSWORD = env.str("REDIS_PASSWORD", default="")
DATABASES = {
    "default": env.db_url_config(url_with_password(
        url=env.str("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        password=env.str("DATABASE_PASSWORD", default=""), name="DATABASE_URL",
        given_as="DATABASE_PASSWORD")),
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

CACHES = {"default": env.cache_url_config(redis_url_with_password(
    url=env.str("CACHE_URL", default="locmemcache://"), password=_REDIS_PASSWORD,
    name="CACHE_URL"))}
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
    # Prometheus scrapes the web app, and the engine's health checks probe it, directly on the
    # internal network, in plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^metrics$", r"^healthz$"]
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
        "ModelVersionStateEnum": "tfplatform.modelregistry.models.ModelVersion.State",
        "SearchStateEnum": "tfplatform.searches.models.Search.State",
        "SearcherEnum": "tfplatform.searches.models.Search.Searcher",
        "NotificationEventEnum": "tfplatform.notifications.events.EventKind",
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
CELERY_BROKER_URL = redis_url_with_password(
    url=env.str("CELERY_BROKER_URL", default="filesystem://"), password=_REDIS_PASSWORD,
    name="CELERY_BROKER_URL")
# Celery prefers the CELERY_BROKER_URL variable to this setting wherever it is set, which would
# drop REDIS_PASSWORD; the read and write URLs it connects with come first, and are these.
CELERY_BROKER_READ_URL = CELERY_BROKER_WRITE_URL = CELERY_BROKER_URL
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's transport, its exchange tables made whole before anyone reads them (broker.py).
    TRANSPORT_ALIASES["filesystem"] = "tfplatform.config.broker:FilesystemTransport"
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
# After a reconnect Celery lowers the prefetch count and raises it again with a synchronous
# basic.qos per finished task. On RabbitMQ with the thread pool two such calls can share the
# channel from two threads: one takes the other's reply and the worker's loop waits forever,
# missing heartbeats, taking nothing (seen in the broker-outage test). The reduction only stops
# a worker from holding a message or two more for a while: trial tasks go to the node's own
# queue and the shared queue's tasks are short, so it buys us nothing.
CELERY_WORKER_ENABLE_PREFETCH_COUNT_REDUCTION = False
CELERY_TASK_DEFAULT_QUEUE = "platform"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = False

# Notification emails (tfplatform.notifications) go through Django's mail backend, configured by
# EMAIL_URL (django-environ: smtp://user@host:587, smtp+tls://…, smtps://…, consolemail://); its
# password apart as EMAIL_HOST_PASSWORD (or _FILE). Unset: printed by the notifier process.
_EMAIL = env.email_url_config(url_with_password(
    url=env.str("EMAIL_URL", default="consolemail://"),
    password=env.str("EMAIL_HOST_PASSWORD", default=""), name="EMAIL_URL",
    given_as="EMAIL_HOST_PASSWORD"))
EMAIL_BACKEND = _EMAIL["EMAIL_BACKEND"]
EMAIL_HOST = _EMAIL["EMAIL_HOST"] or "localhost"
EMAIL_USE_TLS = bool(_EMAIL.get("EMAIL_USE_TLS"))
EMAIL_USE_SSL = bool(_EMAIL.get("EMAIL_USE_SSL"))
EMAIL_PORT = _EMAIL["EMAIL_PORT"] or (465 if EMAIL_USE_SSL else 587 if EMAIL_USE_TLS else 25)
EMAIL_HOST_USER = _EMAIL["EMAIL_HOST_USER"] or ""
EMAIL_HOST_PASSWORD = _EMAIL["EMAIL_HOST_PASSWORD"] or ""
# A mail server that never answers holds one delivery this long, never the notifier.
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="TF Platform <tfplatform@localhost>")

# The platform's own settings (tfplatform/config/platform_settings.py): one frozen, typed object;
# read through `platform_settings()`.
PLATFORM = platform_settings_from_env(env=env, var_dir=VAR_DIR, secret_key=SECRET_KEY)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("PLATFORM_LOG_LEVEL", default="INFO")},
}
