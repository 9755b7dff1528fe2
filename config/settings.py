"""Settings, read from the environment through django-environ.

With nothing set, the platform runs on its embedded default: SQLite, the in-memory channel layer and Celery
in eager mode. `DATABASE_URL` and `REDIS_URL` switch to PostgreSQL and Redis. See README.md and `.env.example`.
"""

import datetime
import secrets
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from config import openapi
from config.proxy import proxy_networks
from core.conf import from_environment

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    env.read_env(BASE_DIR / ".env")

# Off unless asked for: production is the default, development is the path that says so (`make run` sets it).
DEBUG = env.bool("DJANGO_DEBUG", default=False)

# The project's own settings (core.conf.SETTINGS declares each: its environment variable, type, default and what it is
# for), all read here from the environment; the settings below are Django's and its libraries'.
_project = from_environment(env)
globals().update(_project)

# Where the platform keeps files it makes for itself (the development secret, uploads).
VAR_DIR = Path(env.str("VAR_DIR", default=str(BASE_DIR / "var")))


def _development_secret() -> str:
    """A random secret kept in var/, so development sessions survive a restart. Development only."""
    path = VAR_DIR / "dev-secret-key"
    if not path.is_file():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Production mode (DJANGO_DEBUG off) refuses to start without it: "
            "set DJANGO_SECRET_KEY to a long random string, or set DJANGO_DEBUG=1 for local development. "
            "未设置 DJANGO_SECRET_KEY：生产模式（DJANGO_DEBUG 关闭）下拒绝启动，请设置一个足够长的随机字符串，"
            "或在本地开发时设置 DJANGO_DEBUG=1。"
        )
    SECRET_KEY = _development_secret()

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
# Addresses or networks of the proxies in front (comma-separated, e.g. 10.0.0.5,10.1.0.0/16): only a request from one
# of them has its X-Forwarded-For / -Proto believed (config.proxy); none by default, so with nothing in front
# (scripts/serve) the address a request came from is the peer's, whatever its headers say.
TRUSTED_PROXIES = [str(network) for network in proxy_networks(env.list("TRUSTED_PROXIES", default=[]))]

INSTALLED_APPS = [
    "daphne",  # first, so that `runserver` serves ASGI (websockets included)
    "config.apps.PlatformAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "channels",
    "django_celery_beat",
    "tenants",
    "llm",
    "memory",
    "knowledge",
    "toolservers",
    "agents",
    "plans",
    "agents.packs.restaurant",
    "agents.packs.energy",
    "engine",
    "evals",
    "chat",
    "api",
    "widget",
]

MIDDLEWARE = [
    # First: the client's address and forwarded headers, believed only from TRUSTED_PROXIES.
    "config.proxy.ForwardedHeadersMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.StaticFilesMiddleware",  # WhiteNoise, async-capable
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # After authentication: picks the active tenant and enters its scope for the whole request.
    "tenants.middleware.TenantScopeMiddleware",
    # Last: turns a locked-out login (too many wrong passwords) into the lockout page.
    "axes.middleware.AxesMiddleware",
]
# The chain of the OpenAI-compatible endpoint (/v1) under Daphne: no session, CSRF, messages or lock-out, each a
# thread hop per request (config.api_handler). Async-capable middleware only.
API_MIDDLEWARE = [
    "config.proxy.ForwardedHeadersMiddleware",
    "config.api_handler.LanguageMiddleware",
]

# Content-Security-Policy: scripts and everything else from this site only (no inline script: pages load their
# scripts from static/ and read data from json_script blocks); inline style attributes stay allowed (the admin's
# widgets use them); no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "worker-src": ["'self'", "blob:"],  # ReDoc's search runs in a worker it builds from a blob
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Login throttling (django-axes), for the login page and the admin's: after LOGIN_FAILURE_LIMIT wrong passwords from
# one address (any usernames), or for one username (from any addresses), that address or that username is locked
# out for LOGIN_LOCKOUT_MINUTES (answer 429 with an explanation); a successful login resets its address's and its
# username's counts. The address is REMOTE_ADDR, the peer's or, from a trusted proxy, the client's (config.proxy).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
# Counted in Redis when there is one (shared by every process), else in the database (the embedded default's local
# memory cache is per process, which axes rightly refuses).
AXES_HANDLER = (
    "axes.handlers.cache.AxesCacheHandler"
    if env.str("REDIS_URL", default="")
    else "axes.handlers.database.AxesDatabaseHandler"
)
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = datetime.timedelta(minutes=env.float("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)  # never a header the client wrote
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "config.lockout.locked_out"
AXES_VERBOSE = False

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.context_processors.tenancy",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool("DATABASE_POOL", default=True):
    # Django's psycopg pool: a request, a websocket connect or a turn's database hop borrows an open connection and
    # gives it back when the hop ends (nothing is held across a model stream), instead of opening one per hop.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # required with the pool: "closing" returns the connection to it
    # The pool's own check of a connection at each checkout is a round trip per database hop; the pool already
    # drops a connection returned broken, and a server restart surfaces as an error of one request.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("DATABASE_HEALTH_CHECKS", default=False)
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
        "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=10),
        "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
    }
else:
    # Without the pool: 0 closes each request's connection (persistent ones do not mix well with ASGI threads).
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default writes from the request threads and the ingestion thread at once: readers do not block
    # the writer (WAL), a write transaction takes its lock when it begins (no "database is locked" on upgrading a
    # read lock), and a writer waits up to 20 s for another instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="")

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A command timeout above the layer's 5 s blocking receive (redis-py's default equals it, which closed
            # idle sockets with 1011), and keepalive to notice a dead peer.
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": _project["REDIS_SOCKET_TIMEOUT"],
                        "socket_keepalive": True,
                        "health_check_interval": 30,
                    }
                ],
                "prefix": env.str("CHANNELS_PREFIX", default="asgi"),
            },
        }
    }
    # One Redis client per process (core.redis_cache): Django makes a cache object per ASGI request.
    CACHES = {"default": {"BACKEND": "core.redis_cache.SharedRedisCache", "LOCATION": REDIS_URL}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: Redis as broker when REDIS_URL is set, otherwise tasks run in-process (eager).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Seconds after which Redis gives a task whose worker vanished (killed, machine lost) to another worker. Above the
# longest countdown a task is queued with (the plan ask timeout, PLAN_ASK_TIMEOUT_SECONDS), or it runs twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600)}
# Celery beat reads its schedule from the database (django-celery-beat): operators see and change it in the admin
# (Periodic tasks). memory's migrations add the memory sleep schedule.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# The UI ships in Simplified Chinese and English; the browser chooses unless the user switches.
LANGUAGE_CODE = "zh-hans"
LANGUAGES = [("zh-hans", _("Simplified Chinese")), ("en", _("English"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
TIME_ZONE = env.str("DJANGO_TIME_ZONE", default="Asia/Shanghai")
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
MEDIA_URL = "media/"
MEDIA_ROOT = Path(env.str("MEDIA_ROOT", default=str(VAR_DIR / "media")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Files and images sent in conversations (memory.Attachment): never under MEDIA_URL, served only to those who
    # may read their conversation. An S3-compatible store instead (pip install django-storages[s3]):
    # {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {"bucket_name": "...", "endpoint_url": "...",
    #  "access_key": "...", "secret_key": "...", "default_acl": "private", "querystring_auth": True}}
    # The file system under ATTACHMENT_STORAGE_ROOT (default <VAR_DIR>/attachments), read when a file is stored.
    "attachments": {"BACKEND": "memory.storage.AttachmentStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG and env.bool("DJANGO_STATIC_MANIFEST", default=True)
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
# Without collectstatic (development, tests), WhiteNoise serves files straight from the finders.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=DEBUG)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.ApiKeyRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api_key": _project["API_KEY_RATE"]},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.rest.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    # In English; config.openapi.translate_schema gives them (and the tags' descriptions) in the request's language.
    "TITLE": openapi.TITLE,
    "DESCRIPTION": openapi.DESCRIPTION,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "config.openapi.translate_schema"],
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "AgentKindEnum": "agents.models.AgentKind",
        "PlanLogKindEnum": "plans.models.LogKind",
        "EvalRunStatusEnum": "evals.models.RunStatus",
        "EvalResultStatusEnum": "evals.models.ResultStatus",
    },
}

# The site is served over HTTPS only (a TLS proxy in front, or Daphne's own TLS): plain HTTP is redirected (except
# /healthz, for load balancers), browsers are told to use HTTPS for DJANGO_HSTS_SECONDS, cookies are sent over HTTPS
# only. Behind a proxy, its X-Forwarded-Proto says whether the client used HTTPS: believed from TRUSTED_PROXIES only.
BEHIND_TLS = env.bool("DJANGO_BEHIND_TLS", default=False)
if TRUSTED_PROXIES:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if BEHIND_TLS:
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=31_536_000)
    # Only when every subdomain is served over HTTPS too (browsers would refuse them otherwise).
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=False)
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
elif not DEBUG:
    SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # axes logs every login and its reset at INFO; its lockouts are WARNING.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
