"""TLS and SASL settings reach every Kafka client streamon creates (issue 15, item 4).

Each client kind is built with its real code path; the client classes are replaced by recorders,
so no broker and no real TLS are needed (the key files are dummies, except where a TLS context is
really built).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import faust
import pytest

from processors.runtime import kafka_security as ks
from processors.runtime.config import ConfigError, load_settings

SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": "s3cret-pw",
}


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, str]:
    files = {}
    for key, name in (("ssl.ca.location", "ca.pem"), ("ssl.certificate.location", "client.pem"),
                      ("ssl.key.location", "client.key")):  # fmt: skip
        (tmp_path / name).write_text("dummy\n")
        files[key] = str(tmp_path / name)
    return files


@pytest.fixture
def scram() -> ks.KafkaSecurity:
    return ks.parse_security(SCRAM)


@pytest.fixture
def tls(tls_files: dict[str, str]) -> ks.KafkaSecurity:
    return ks.parse_security({"security.protocol": "SSL", "ssl.key.password": "keypw", **tls_files})


@pytest.fixture(params=["scram", "tls"])
def security(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ks.KafkaSecurity:
    """Each kind of settings, installed as the process's (what resolve_bootstrap does)."""
    value = request.getfixturevalue(request.param)
    monkeypatch.setattr(ks, "_current", value)
    return value


class Recorder:
    """Stands in for a confluent-kafka client class: keeps each config, answers nothing."""

    configs: list[dict] = []

    def __init__(self, config: dict, *args: Any, **kwargs: Any) -> None:
        Recorder.configs.append(config)

    def poll(self, timeout: float = 0) -> int:  # a producer's delivery-report thread calls it
        return 0

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("recorded client: stop here")


def _contains(config: dict, security: ks.KafkaSecurity) -> None:
    for key, value in security.values:
        assert config[key] == value, key


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    import confluent_kafka
    import confluent_kafka.admin

    Recorder.configs = []
    for module in (confluent_kafka, confluent_kafka.admin):
        for name in ("Consumer", "Producer", "AdminClient"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, Recorder)
    from topics import admin

    monkeypatch.setattr(admin, "AdminClient", Recorder)  # imported by name there
    monkeypatch.setattr(admin, "Consumer", Recorder)
    return Recorder.configs


def test_record_producer(security: ks.KafkaSecurity, recorded: list[dict]) -> None:
    from processors.runtime.producer import RecordProducer

    producer = RecordProducer("broker:9093")
    producer._stop.set()
    _contains(recorded[0], security)
    assert recorded[0]["enable.idempotence"] is True  # its own settings stay


def test_explicit_settings_win_over_the_process_ones(
    scram: ks.KafkaSecurity, tls: ks.KafkaSecurity, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ks, "_current", scram)
    config = ks.client_config({"bootstrap.servers": "b:1"}, tls)
    _contains(config, tls)
    assert "sasl.username" not in config


def test_admin_and_admin_consumers(
    security: ks.KafkaSecurity, recorded: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    from topics import admin

    admin._admin("b:1")
    with pytest.raises(RuntimeError):
        admin.high_watermarks("b:1", "t", extra={"fetch.max.bytes": "1"})
    _contains(recorded[0], security)
    _contains(recorded[1], security)
    assert recorded[1]["fetch.max.bytes"] == "1"


def test_control_consumer_and_producer(security: ks.KafkaSecurity, recorded: list[dict]) -> None:
    from processors.runtime import control

    with pytest.raises(RuntimeError):
        control.ControlReader("b:1", control.CONTROL_TOPIC, "q", lambda record: None)
    _contains(recorded[0], security)
    from confluent_kafka import Producer

    assert Producer is Recorder
    # publish_policy: its topic check and its producer both take the settings
    recorded.clear()
    with pytest.raises(RuntimeError):
        control.publish_policy("b:1", "q", "query", {}, "test")
    assert recorded and all(k in c for c in recorded for k, _ in security.values)


def test_tail_and_publish_commands(
    security: ks.KafkaSecurity, recorded: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    from processors.commands import publish_cmd, tail

    monkeypatch.setattr(tail, "Consumer", Recorder)
    tail._consumer("b:1")
    _contains(recorded[0], security)
    with pytest.raises(RuntimeError):
        publish_cmd._ensure_topic("b:1", "t", 1, None)  # type: ignore[arg-type]
    _contains(recorded[1], security)


def test_bench_spark_consumer(security: ks.KafkaSecurity, recorded: list[dict]) -> None:
    from processors.bench import spark as bench_spark

    with pytest.raises(RuntimeError):
        bench_spark.raw_consume("b:1", "t", [0], {0: 1})
    _contains(recorded[0], security)


def test_faust_settings_scram(scram: ks.KafkaSecurity) -> None:
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from processors.runtime.worker import faust_settings

    settings = faust_settings("b:1", Path("/tmp/x"), 6.0, scram)
    creds = settings["broker_credentials"]
    assert isinstance(creds, faust.SASLCredentials)
    auth = credentials_to_aiokafka_auth(creds)
    assert auth["security_protocol"] == "SASL_SSL"
    assert auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("alice", "s3cret-pw")
    assert isinstance(auth["ssl_context"], ssl.SSLContext)
    assert "s3cret" not in repr(creds)


def test_faust_settings_tls(tls: ks.KafkaSecurity, monkeypatch: pytest.MonkeyPatch) -> None:
    from processors.runtime.worker import faust_settings

    loaded: list[tuple] = []

    class Context:
        check_hostname = True

        def load_cert_chain(self, *args: Any) -> None:
            loaded.append(args)

    made: list[Any] = []
    monkeypatch.setattr(ks.ssl, "create_default_context", lambda **kw: made.append(kw) or Context())
    creds = faust_settings("b:1", Path("/tmp/x"), 6.0, tls)["broker_credentials"]
    assert isinstance(creds, faust.SSLCredentials)
    assert made == [{"cafile": tls.get("ssl.ca.location")}]
    assert loaded == [(tls.get("ssl.certificate.location"), tls.get("ssl.key.location"), "keypw")]


def test_faust_settings_use_the_process_settings(
    scram: ks.KafkaSecurity, monkeypatch: pytest.MonkeyPatch
) -> None:
    from processors.runtime.worker import faust_settings

    monkeypatch.setattr(ks, "_current", ks.KafkaSecurity())
    assert faust_settings("b:1", Path("/tmp/x"), 6.0)["broker_credentials"] is None
    monkeypatch.setattr(ks, "_current", scram)
    assert isinstance(faust_settings("b:1", Path("/tmp/x"), 6.0)["broker_credentials"],
                      faust.SASLCredentials)  # fmt: skip


def test_bench_aiokafka_consumer(scram: ks.KafkaSecurity) -> None:
    auth = ks.aiokafka_auth(scram)
    assert auth["sasl_mechanism"] == "SCRAM-SHA-512" and auth["sasl_plain_username"] == "alice"


def test_spark_source_options_reach_driver_and_executor_consumers(
    security: ks.KafkaSecurity,
) -> None:
    from spark_bridge.kafka_range import consumer_config
    from spark_bridge.options import parse_options
    from spark_bridge.read import source_options

    opts = parse_options(source_options("t", "b:1"))
    _contains(dict(opts.consumer), security)  # planned on the driver, pickled to executors
    _contains(consumer_config("b:1", False, opts.consumer), security)  # read_range's consumer


def test_spark_kafka_connector_options(scram: ks.KafkaSecurity, tls: ks.KafkaSecurity) -> None:
    from spark_bridge.connector import jvm_client_settings
    from spark_bridge.options import OptionError

    jvm = jvm_client_settings(ks.librdkafka_config(scram))
    assert jvm["security.protocol"] == "SASL_SSL" and jvm["sasl.mechanism"] == "SCRAM-SHA-512"
    assert "ScramLoginModule required" in jvm["sasl.jaas.config"]
    with pytest.raises(OptionError, match="client certificates"):
        jvm_client_settings(ks.librdkafka_config(tls))


# -- the settings themselves ----------------------------------------------------------------


def test_file_table_and_env_override(tmp_path: Path, tls_files: dict[str, str]) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_text("x")
    cfg = tmp_path / "streamon.toml"
    cfg.write_text(
        'bootstrap = "b:9093"\n[kafka]\n"security.protocol" = "sasl_ssl"\n'
        '"sasl.mechanism" = "PLAIN"\n"sasl.username" = "file-user"\n"sasl.password" = "pw"\n'
        '"ssl.ca.location" = "certs/ca.pem"\n'
    )
    env = {"STREAMON_CONFIG": str(cfg)}
    kafka = load_settings(env).kafka
    assert kafka.protocol == "SASL_SSL"
    assert kafka.get("ssl.ca.location") == str(tmp_path / "certs" / "ca.pem")  # file-relative
    env.update(
        STREAMON_KAFKA_SASL_USERNAME="env-user", STREAMON_KAFKA_SASL_MECHANISM="scram-sha-256"
    )
    kafka = load_settings(env).kafka
    assert kafka.get("sasl.username") == "env-user"
    assert kafka.get("sasl.mechanism") == "SCRAM-SHA-256"


def test_env_only(tls_files: dict[str, str]) -> None:
    env = {ks.env_name(k): v for k, v in tls_files.items()}
    env[ks.env_name("security.protocol")] = "SSL"
    assert ks.env_name("security.protocol") == "STREAMON_KAFKA_SECURITY_PROTOCOL"
    assert load_settings(env).kafka.get("ssl.key.location") == tls_files["ssl.key.location"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"security.protocol": "TLS"}, "'security.protocol'.*'TLS' is not one of"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "'sasl.mechanism'"),
        ({"sasl.user": "x"}, "'sasl.user'.*unknown Kafka setting"),
        ({"security.protocol": "SSL", "ssl.ca.location": "nope.pem"}, "'ssl.ca.location'.*nope"),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs sasl.username"),
        ({"sasl.mechanism": "PLAIN"}, "'sasl.mechanism'.*PLAINTEXT"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "x"}, "'https'"),
    ],
)
def test_bad_file_settings_name_the_key(tmp_path: Path, table: dict, message: str) -> None:
    cfg = tmp_path / "streamon.toml"
    lines = "".join(f'"{k}" = "{v}"\n' for k, v in table.items())
    cfg.write_text(f"[kafka]\n{lines}")
    with pytest.raises(ConfigError, match=message):
        load_settings({"STREAMON_CONFIG": str(cfg)})


def test_bad_env_settings_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="STREAMON_KAFKA_SASL_MECHANISMS.*unknown"):
        load_settings({"STREAMON_KAFKA_SASL_MECHANISMS": "PLAIN"})
    with pytest.raises(ConfigError, match="STREAMON_KAFKA_SECURITY_PROTOCOL"):
        load_settings({"STREAMON_KAFKA_SECURITY_PROTOCOL": "HTTPS"})


def test_passwords_are_masked(tls_files: dict[str, str]) -> None:
    env = {ks.env_name(k): v for k, v in SCRAM.items()}
    settings = load_settings(env)
    for text in (repr(settings), str(settings), repr(settings.kafka), str(settings.kafka)):
        assert "s3cret-pw" not in text
        assert "alice" in text
    tls = ks.parse_security({"security.protocol": "SSL", "ssl.key.password": "kpw", **tls_files})
    assert "kpw" not in repr(tls)


def test_secured_settings_need_a_bootstrap(tmp_path: Path) -> None:
    from processors.runtime.config import resolve_bootstrap

    settings = load_settings({**{ks.env_name(k): v for k, v in SCRAM.items()},
                              "STREAMON_STATE_DIR": str(tmp_path)})  # fmt: skip
    try:
        with pytest.raises(ConfigError, match="embedded broker serves PLAINTEXT"):
            resolve_bootstrap(settings)
    finally:
        ks.install_security(None)
