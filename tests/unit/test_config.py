"""Settings precedence and config-file validation (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.runtime.config import ConfigError, Settings, load_settings, resolve_bootstrap

# each test runs in an empty cwd, so a developer's ./streamon.toml cannot leak in
pytestmark = pytest.mark.usefixtures("no_local_settings")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_without_env_or_file(tmp_path: Path) -> None:
    settings = load_settings({})
    assert settings == Settings(None, None, tmp_path / ".streamon", 6.0)


def test_cwd_streamon_toml_is_read(tmp_path: Path) -> None:
    _write(tmp_path / "streamon.toml", 'bootstrap = "k1:9092"\nsession_timeout_s = 10\n')
    settings = load_settings({})
    assert settings.bootstrap == "k1:9092"
    assert settings.session_timeout_s == 10.0
    assert isinstance(settings.session_timeout_s, float)


def test_env_beats_file_and_file_beats_defaults(tmp_path: Path) -> None:
    cfg = _write(
        tmp_path / "other.toml",
        'bootstrap = "file:1"\nschema_registry_url = "http://file"\nstate_dir = "st"\n',
    )
    _write(tmp_path / "streamon.toml", 'bootstrap = "ignored:1"\n')
    from_file = load_settings({"STREAMON_CONFIG": str(cfg)})
    assert from_file.bootstrap == "file:1"
    assert from_file.schema_registry_url == "http://file"
    assert from_file.state_dir == tmp_path / "st"

    env = {
        "STREAMON_CONFIG": str(cfg),
        "STREAMON_BOOTSTRAP": "env:2",
        "STREAMON_SCHEMA_REGISTRY_URL": "http://env",
        "STREAMON_STATE_DIR": "envstate",
    }
    from_env = load_settings(env)
    assert from_env.bootstrap == "env:2"
    assert from_env.schema_registry_url == "http://env"
    assert from_env.state_dir == tmp_path / "envstate"


def test_empty_env_values_count_as_unset(tmp_path: Path) -> None:
    _write(tmp_path / "streamon.toml", 'bootstrap = "file:1"\n')
    assert load_settings({"STREAMON_BOOTSTRAP": "  "}).bootstrap == "file:1"


def test_state_dir_in_file_is_relative_to_the_file(tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    cfg = _write(conf_dir / "s.toml", 'state_dir = "state"\n')
    assert load_settings({"STREAMON_CONFIG": str(cfg)}).state_dir == conf_dir / "state"


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMON_BOOTSTRAP", "osenv:9")
    monkeypatch.delenv("STREAMON_CONFIG", raising=False)
    assert load_settings().bootstrap == "osenv:9"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('bootstrapp = "x:1"\n', "bootstrapp"),
        ("bootstrap = 9092\n", "bootstrap"),
        ('bootstrap = ""\n', "bootstrap"),
        ('session_timeout_s = "6"\n', "session_timeout_s"),
        ("session_timeout_s = true\n", "session_timeout_s"),
        ("session_timeout_s = -1\n", "session_timeout_s"),
        ("state_dir = []\n", "state_dir"),
        ("[bootstrap]\nhost = 'x'\n", "bootstrap"),
    ],
)
def test_bad_key_or_type_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = _write(tmp_path / "bad.toml", text)
    with pytest.raises(ConfigError) as info:
        load_settings({"STREAMON_CONFIG": str(cfg)})
    assert str(cfg) in str(info.value)
    assert repr(key) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "broken.toml", "bootstrap = \n")
    with pytest.raises(ConfigError, match="broken.toml.*invalid TOML"):
        load_settings({"STREAMON_CONFIG": str(cfg)})


def test_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="nope.toml.*cannot read"):
        load_settings({"STREAMON_CONFIG": str(missing)})


def test_resolve_bootstrap_prefers_configured_bootstrap(tmp_path: Path) -> None:
    settings = Settings("configured:1", None, tmp_path / "never-used")
    assert resolve_bootstrap(settings) == "configured:1"
    assert not (tmp_path / "never-used").exists()


def test_resolve_bootstrap_without_start_needs_a_running_broker(tmp_path: Path) -> None:
    from processors.runtime.broker import BrokerError

    with pytest.raises(BrokerError, match="no embedded broker running"):
        resolve_bootstrap(Settings(None, None, tmp_path / "empty"), start=False)


def test_decode_bounds_come_from_the_file_and_the_environment_beats_it(tmp_path: Path) -> None:
    from topics.avro import load_schema
    from topics.avro_bounds import DecodeLimits, install_limits
    from topics.columnar import RecordCodec

    _write(tmp_path / "streamon.toml", "[decode]\nmax_record_bytes = 4096\nmax_nesting = 8\n")
    try:
        settings = load_settings({"STREAMON_DECODE_MAX_NESTING": "5"})
        assert settings.decode == DecodeLimits(max_record_bytes=4096, max_nesting=5)
        # every codec made afterwards keeps them
        assert RecordCodec(load_schema("reading")).limits == settings.decode
    finally:
        install_limits(DecodeLimits())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[decode]\nmax_record_bytes = 0\n", "positive integer"),
        ("[decode]\nmax_record_bytes = true\n", "positive integer"),
        ("[decode]\nmax_items = 3\n", "unknown"),
        ("decode = 3\n", "must be a table"),
    ],
)
def test_bad_decode_bounds_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    _write(tmp_path / "streamon.toml", text)
    with pytest.raises(ConfigError, match=message):
        load_settings({})
