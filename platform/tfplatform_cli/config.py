"""Where the client finds its server and token: flags, environment, then the credentials file."""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tfplatform_cli.errors import CliError

DEFAULT_SERVER = "http://127.0.0.1:8000"
CREDENTIALS_FILE = "credentials.json"


@dataclass(frozen=True)
class Credentials:
    server: str
    token: str
    username: str = ""


def config_dir() -> Path:
    override = os.environ.get("TFP_CONFIG_DIR")
    return Path(override).expanduser() if override else Path.home() / ".config" / "tfp"


def credentials_path() -> Path:
    return config_dir() / CREDENTIALS_FILE


def server_normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"server URL must look like http://host:port, not {url!r}")
    return url


def credentials_load() -> Credentials | None:
    path = credentials_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Credentials(
            server=str(data["server"]), token=str(data["token"]), username=str(data["username"])
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CliError(f"cannot read {path} ({error}); run `tfp login` again") from error


def credentials_save(credentials: Credentials) -> Path:
    """Write the token readable by this user only, replacing the file in one step."""
    path = credentials_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    body = json.dumps(
        {
            "server": credentials.server,
            "username": credentials.username,
            "token": credentials.token,
        },
        indent=2,
    )
    try:
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # A leftover partial file keeps its old mode through O_CREAT; set it explicitly.
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(body + "\n")
        os.replace(partial, path)
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from error
    return path


def credentials_delete() -> Credentials | None:
    stored = credentials_load()
    credentials_path().unlink(missing_ok=True)
    return stored


def server_resolve(flag: str | None, *, ignore_damaged: bool = False) -> str:
    """--server, then TFP_SERVER, then the server logged in to, then the local default.

    `tfp login` ignores a damaged credentials file: it is about to replace it.
    """
    chosen = flag or os.environ.get("TFP_SERVER")
    if not chosen:
        try:
            stored = credentials_load()
        except CliError:
            if not ignore_damaged:
                raise
            stored = None
        chosen = stored.server if stored else DEFAULT_SERVER
    return server_normalize(chosen)


def token_resolve(server: str) -> str:
    """TFP_TOKEN, else the stored token, which is only ever sent to the server that issued it."""
    token = os.environ.get("TFP_TOKEN")
    if token:
        return token
    stored = credentials_load()
    if stored is None:
        raise CliError("not logged in: run `tfp login` (or set TFP_TOKEN)")
    if stored.server != server:
        raise CliError(
            f"logged in to {stored.server}, not {server}: run `tfp login --server {server}`"
        )
    return stored.token
