"""Where Kafka is: settings from the environment, then a TOML file, then defaults.

The same code runs against the embedded tansu broker in development and a real cluster in
production; only these settings differ. With no bootstrap configured, the embedded broker of the
state directory is used (and started if needed).

Like git with ``.git``, commands find their project from any subfolder: the nearest of the
working directory and its parents that holds ``streamon.toml`` or a ``.streamon`` state
directory gives the config file and the default state directory (so ``broker status`` run in
``src/`` sees the broker started at the project root).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processors.runtime.kafka_security import (
    ENV_PREFIX,
    FILE_KEYS,
    KEYS,
    KafkaSecurity,
    SecurityError,
    env_name,
    install_security,
    parse_security,
)
from topics.avro_bounds import LIMIT_NAMES, DecodeLimits, install_limits

__all__ = ["ConfigError", "Settings", "find_project", "load_settings", "resolve_bootstrap"]

ENV_BOOTSTRAP = "STREAMON_BOOTSTRAP"
ENV_SCHEMA_REGISTRY = "STREAMON_SCHEMA_REGISTRY_URL"
ENV_STATE_DIR = "STREAMON_STATE_DIR"
ENV_CONFIG = "STREAMON_CONFIG"
DEFAULT_CONFIG_FILE = "streamon.toml"
DEFAULT_STATE_DIR = ".streamon"
DEFAULT_SESSION_TIMEOUT_S = 6.0


class ConfigError(ValueError):
    """The configuration is unreadable or invalid; the message names the file and key."""


@dataclass(frozen=True)
class Settings:
    """Resolved settings; ``bootstrap=None`` means "use the embedded broker"."""

    bootstrap: str | None
    schema_registry_url: str | None
    state_dir: Path
    # Short, because a classic group join on tansu takes about half of it (see DESIGN.md).
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    #: TLS and SASL settings of every Kafka client (the ``[kafka]`` table, STREAMON_KAFKA_*);
    #: its repr masks the passwords
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: bounds on every record decode (the ``[decode]`` table, STREAMON_DECODE_*)
    decode: DecodeLimits = field(default_factory=DecodeLimits)


def _check_str(value: Any, path: Path, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{path}: key {key!r} must be a non-empty string, got {value!r}")
    return value.strip()


def _check_timeout(value: Any, path: Path, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{path}: key {key!r} must be a positive number, got {value!r}")
    return float(value)


def _state_dir(value: Any, path: Path, key: str) -> Path:
    # Relative paths in a config file are relative to that file, not to the caller's cwd.
    return path.parent / Path(_check_str(value, path, key)).expanduser()


_CHECKS = {
    "bootstrap": _check_str,
    "schema_registry_url": _check_str,
    "state_dir": _state_dir,
    "session_timeout_s": _check_timeout,
}


#: keys that hold a table: Kafka client security, decode bounds
_TABLES = ("kafka", "decode")


def _decode_limits(
    table: Mapping[str, Any], path: Path | None, env: Mapping[str, str]
) -> DecodeLimits:
    """The ``[decode]`` table (bounds on every record decode), each bound overridden by its
    STREAMON_DECODE_* variable."""
    values = {}
    for key, value in table.items():
        if key not in LIMIT_NAMES:
            raise ConfigError(f"{path}: [decode] key {key!r} is unknown (known: "
                              f"{', '.join(LIMIT_NAMES)})")  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{path}: [decode] key {key!r} must be a positive integer, "
                              f"got {value!r}")  # fmt: skip
        values[key] = value
    try:
        return DecodeLimits.from_env(env, DecodeLimits(**values))
    except ValueError as exc:
        raise ConfigError(f"environment: {exc}") from exc


def find_project(start: Path | None = None) -> Path | None:
    """The nearest of ``start`` (default: the cwd) and its parents that holds streamon.toml or
    a .streamon state directory; None when there is none up to the root."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_CONFIG_FILE).is_file() or (folder / DEFAULT_STATE_DIR).is_dir():
            return folder
    return None


def _config_path(env: Mapping[str, str], project: Path | None) -> Path | None:
    explicit = env.get(ENV_CONFIG, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    default = (project or Path()) / DEFAULT_CONFIG_FILE
    return default if default.is_file() else None


def _read_file(path: Path) -> dict[str, Any]:
    """Validated values from a TOML config file."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: key {key!r} must be a table ([{key}]), got {value!r}")
            values[key] = value
            continue
        check = _CHECKS.get(key)
        if check is None:
            known = ", ".join(sorted([*_CHECKS, *_TABLES]))
            raise ConfigError(f"{path}: unknown key {key!r} (known keys: {known})")
        values[key] = check(value, path, key)
    return values


def _kafka_security(
    table: Mapping[str, Any], path: Path | None, env: Mapping[str, str]
) -> KafkaSecurity:
    """The ``[kafka]`` table of the file, each key overridden by its STREAMON_KAFKA_* variable."""
    raw = dict(table)
    sources = {key: f"{path}: [kafka] key {key!r}" for key in raw}
    by_var = {env_name(key): key for key in KEYS}
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX) or not value.strip():
            continue
        key = by_var.get(var)
        if key is None:
            known = ", ".join(by_var)
            raise ConfigError(f"environment variable {var}: unknown Kafka setting (known: {known})")
        raw[key] = value
        sources[key] = f"environment variable {var}"
    # Relative files in the config file are relative to it; from the environment, to the cwd.
    for key in FILE_KEYS:
        value = raw.get(key)
        from_file = path is not None and key in table and sources[key].startswith(str(path))
        if from_file and isinstance(value, str) and value.strip():
            assert path is not None
            raw[key] = str(path.parent / Path(value.strip()).expanduser())
    try:
        return parse_security(raw, sources)
    except SecurityError as exc:
        raise ConfigError(str(exc)) from exc


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from env (STREAMON_*), then the TOML config file, then defaults."""
    env = os.environ if env is None else env
    project = find_project()
    path = _config_path(env, project)
    values = _read_file(path) if path is not None else {}
    kafka = _kafka_security(values.pop("kafka", {}), path, env)
    decode = _decode_limits(values.pop("decode", {}), path, env)
    install_limits(decode)  # every codec of this process keeps them
    for key, var in (
        ("bootstrap", ENV_BOOTSTRAP),
        ("schema_registry_url", ENV_SCHEMA_REGISTRY),
        ("state_dir", ENV_STATE_DIR),
    ):
        value = env.get(var, "").strip()
        if value:
            values[key] = Path(value).expanduser() if key == "state_dir" else value
    state_dir = Path(values.get("state_dir", (project or Path()) / DEFAULT_STATE_DIR)).absolute()
    return Settings(
        bootstrap=values.get("bootstrap"),
        schema_registry_url=values.get("schema_registry_url"),
        state_dir=state_dir,
        session_timeout_s=values.get("session_timeout_s", DEFAULT_SESSION_TIMEOUT_S),
        kafka=kafka,
        decode=decode,
    )


def resolve_bootstrap(settings: Settings | None = None, start: bool = True) -> str:
    """The configured bootstrap, else the embedded broker's (started if ``start``)."""
    settings = load_settings() if settings is None else settings
    install_security(settings.kafka)  # every client of this process uses them from now on
    if settings.bootstrap:
        return settings.bootstrap
    if settings.kafka.protocol != "PLAINTEXT":
        raise ConfigError(
            f"security.protocol is {settings.kafka.protocol} but no bootstrap is configured: "
            "the embedded broker serves PLAINTEXT only; set STREAMON_BOOTSTRAP or bootstrap"
        )
    # Imported here so that reading settings does not load the Kafka client.
    from processors.runtime.broker import BrokerError, broker_status, start_broker

    if start:
        return start_broker(settings.state_dir).bootstrap
    info = broker_status(settings.state_dir)
    if info is None:
        raise BrokerError(
            f"no bootstrap configured and no embedded broker running in {settings.state_dir}; "
            "run `streamon broker start` or set STREAMON_BOOTSTRAP"
        )
    return info.bootstrap
