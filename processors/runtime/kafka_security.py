"""Kafka security settings (TLS, SASL) and their spelling for each client library streamon uses.

One validated value, :class:`KafkaSecurity`, comes from the ``[kafka]`` table of streamon.toml
and ``STREAMON_KAFKA_*`` variables (:mod:`processors.runtime.config`). Each client kind gets it
in its own dialect: librdkafka keys for confluent-kafka producers, consumers and admin clients
(:func:`client_config`), Faust's ``broker_credentials`` for aiokafka (:func:`faust_credentials`),
and ``kafka.``-prefixed options for the Spark data source (:func:`spark_options`).

The process installs its settings once (:func:`install_security`, done by
``resolve_bootstrap``); a process that never did reads them from its environment and config
file on first use, so a client created anywhere in streamon gets the same settings.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KEYS",
    "KafkaSecurity",
    "aiokafka_auth",
    "SecurityError",
    "client_config",
    "current_security",
    "env_name",
    "faust_credentials",
    "install_security",
    "parse_security",
    "spark_options",
    "ssl_context",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")
SECRET_KEYS = ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret")
OAUTH_KEYS = (
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.scope",
)
KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    *FILE_KEYS,
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    *OAUTH_KEYS,
)
ENV_PREFIX = "STREAMON_KAFKA_"


class SecurityError(ValueError):
    """A Kafka security setting is unknown or invalid; the message names where it came from."""


def env_name(key: str) -> str:
    """A key's environment variable: ``sasl.mechanism`` -> ``STREAMON_KAFKA_SASL_MECHANISM``."""
    return ENV_PREFIX + key.replace(".", "_").upper()


@dataclass(frozen=True)
class KafkaSecurity:
    """Validated librdkafka-style security keys; empty means PLAINTEXT with no credentials."""

    values: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return dict(self.values).get(key)

    @property
    def protocol(self) -> str:
        return self.get("security.protocol") or "PLAINTEXT"

    def __repr__(self) -> str:  # secrets never reach a log line
        shown = {k: "***" if k in SECRET_KEYS else v for k, v in self.values}
        return f"KafkaSecurity({shown})"

    __str__ = __repr__


def _where(sources: Mapping[str, str], key: str) -> str:
    return sources.get(key, f"key {key!r}")


def parse_security(
    raw: Mapping[str, Any], sources: Mapping[str, str] | None = None, base: Path | None = None
) -> KafkaSecurity:
    """Validate ``raw`` (key -> value). ``sources`` says, per key, where it came from (for the
    error text); relative file paths are taken from ``base`` (the config file's folder)."""
    sources = sources or {}
    values: dict[str, str] = {}
    for key, value in raw.items():
        where = _where(sources, key)
        if key not in KEYS:
            raise SecurityError(f"{where}: unknown Kafka setting (known: {', '.join(KEYS)})")
        if not isinstance(value, str) or not value.strip():
            raise SecurityError(f"{where}: must be a non-empty string, got {value!r}")
        value = value.strip()
        if key == "security.protocol":
            value = value.upper()
            if value not in PROTOCOLS:
                raise SecurityError(f"{where}: {value!r} is not one of {', '.join(PROTOCOLS)}")
        elif key == "sasl.mechanism":
            value = value.upper()
            if value not in MECHANISMS:
                raise SecurityError(f"{where}: {value!r} is not one of {', '.join(MECHANISMS)}")
        elif key == "ssl.endpoint.identification.algorithm":
            value = value.lower()
            if value not in ("https", "none"):
                raise SecurityError(f"{where}: {value!r} is not 'https' or 'none'")
        elif key in FILE_KEYS:
            path = Path(value).expanduser()
            path = (base / path) if base is not None and not path.is_absolute() else path
            if not path.is_file():
                raise SecurityError(f"{where}: file {str(path)!r} does not exist")
            value = str(path.absolute())
        values[key] = value
    _check_combination(values, sources)
    return KafkaSecurity(tuple(sorted(values.items())))


def _check_combination(values: dict[str, str], sources: Mapping[str, str]) -> None:
    """Settings that cannot work together fail here, not as a silent connection timeout."""
    protocol = values.get("security.protocol", "PLAINTEXT")
    sasl, tls = protocol.startswith("SASL_"), protocol.endswith("SSL")
    for key in values:
        if key.startswith("sasl.") and not sasl:
            raise SecurityError(
                f"{_where(sources, key)}: set, but security.protocol is {protocol} (no SASL)"
            )
        if key.startswith("ssl.") and not tls:
            raise SecurityError(
                f"{_where(sources, key)}: set, but security.protocol is {protocol} (no TLS)"
            )
    mechanism = values.get("sasl.mechanism")
    if sasl and mechanism is None:
        raise SecurityError(f"security.protocol {protocol} needs sasl.mechanism")
    needed = (
        ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
         "sasl.oauthbearer.token.endpoint.url")
        if mechanism == "OAUTHBEARER"
        else ("sasl.username", "sasl.password") if sasl else ()
    )  # fmt: skip
    for key in needed:
        if key not in values:
            raise SecurityError(f"sasl.mechanism {mechanism} needs {key}")
    if ("ssl.certificate.location" in values) != ("ssl.key.location" in values):
        raise SecurityError("ssl.certificate.location and ssl.key.location go together")


def librdkafka_config(security: KafkaSecurity) -> dict[str, str]:
    """The settings as confluent-kafka (librdkafka) configuration keys."""
    config = dict(security.values)
    if config.get("sasl.mechanism") == "OAUTHBEARER":
        config["sasl.oauthbearer.method"] = "oidc"
    return config


_current: KafkaSecurity | None = None


def install_security(security: KafkaSecurity | None) -> None:
    """Make ``security`` the settings of every client this process creates from now on."""
    global _current
    _current = security


def current_security() -> KafkaSecurity:
    """The installed settings, else those of this process's environment and config file."""
    if _current is None:
        from processors.runtime.config import load_settings

        install_security(load_settings().kafka)
    assert _current is not None
    return _current


def client_config(base: Mapping[str, Any], security: KafkaSecurity | None = None) -> dict:
    """A confluent-kafka client's configuration: ``base`` plus the security settings
    (``security``, else the process's)."""
    return {**base, **librdkafka_config(security or current_security())}


def ssl_context(security: KafkaSecurity) -> ssl.SSLContext:
    """A client TLS context from the CA, certificate and key files (system CAs without one)."""
    context = ssl.create_default_context(cafile=security.get("ssl.ca.location"))
    if security.get("ssl.endpoint.identification.algorithm") == "none":
        context.check_hostname = False  # the certificate chain is still verified
    cert = security.get("ssl.certificate.location")
    if cert is not None:
        context.load_cert_chain(
            cert, security.get("ssl.key.location"), security.get("ssl.key.password")
        )
    return context


def faust_credentials(security: KafkaSecurity) -> Any:
    """Faust's ``broker_credentials`` (used by its aiokafka consumer, producer and admin)."""
    import faust

    protocol = security.protocol
    if protocol == "PLAINTEXT":
        return None
    context = ssl_context(security) if protocol.endswith("SSL") else None
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    if security.get("sasl.mechanism") == "OAUTHBEARER":
        from processors.runtime.oauth_token import ClientCredentialsToken

        provider = ClientCredentialsToken(
            str(security.get("sasl.oauthbearer.token.endpoint.url")),
            str(security.get("sasl.oauthbearer.client.id")),
            str(security.get("sasl.oauthbearer.client.secret")),
            security.get("sasl.oauthbearer.scope"),
        )
        credentials = faust.OAuthCredentials(oauth_cb=provider, ssl_context=context)
    else:
        credentials = faust.SASLCredentials(
            username=security.get("sasl.username"),
            password=security.get("sasl.password"),
            ssl_context=context,
            mechanism=security.get("sasl.mechanism"),
        )
    return credentials


def aiokafka_auth(security: KafkaSecurity | None = None) -> dict[str, Any]:
    """Keyword arguments of a plain aiokafka client, the same ones Faust gives its own."""
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    return dict(credentials_to_aiokafka_auth(faust_credentials(security or current_security())))


def spark_options(security: KafkaSecurity | None = None) -> dict[str, str]:
    """The settings as options of the streamon Spark data source (``kafka.<librdkafka key>``),
    which hands them to the consumers on the driver and the executors."""
    return {f"kafka.{k}": v for k, v in librdkafka_config(security or current_security()).items()}
