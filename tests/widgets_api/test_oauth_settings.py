"""The settings that guard OAuth: the token key (required with an external Redis,
validated, persisted for one local server) and secrets kept out of the settings' repr."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from parkway.transport.settings import Settings, SettingsError
from parkway.widgets_api.connect.cipher import TokenCipher, generate_token_key
from tests.helpers.oauth_support import SECRET

PROVIDERS_JSON = json.dumps(
    [{"name": "acme", "preset": "github", "client_id": "c", "client_secret": SECRET}]
)


def test_external_redis_with_providers_requires_a_token_key(tmp_path: Path) -> None:
    """Each worker generating its own key would make tokens unreadable across workers."""
    from parkway.transport.app import create_app

    settings = Settings.from_sources(
        environ={
            "PARKWAY_REDIS_URL": "redis://127.0.0.1:1/0",
            "PARKWAY_SECRET_KEY": "s" * 40,
            "PARKWAY_AUTH": "anonymous",
            "PARKWAY_OAUTH_PROVIDERS": PROVIDERS_JSON,
            "PARKWAY_DATA_DIR": str(tmp_path),
        }
    )
    with pytest.raises(SettingsError, match="PARKWAY_TOKEN_KEY"):
        create_app(settings)
    assert not (tmp_path / "token.key").exists()


@pytest.mark.parametrize(
    "value",
    ["short", "not base64 at all!!", generate_token_key()[:20], f"{generate_token_key()},x"],
    # named, not shown: the generated keys differ in each pytest-xdist worker
    ids=["short", "not-base64", "truncated-key", "key-and-junk"],
)
def test_malformed_token_key_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="PARKWAY_TOKEN_KEY"):
        Settings.from_sources(environ={"PARKWAY_TOKEN_KEY": value})


def test_embedded_default_persists_and_reuses_the_token_key(tmp_path: Path) -> None:
    """One local server restarted keeps reading the tokens it stored."""
    first = Settings(data_dir=tmp_path).resolve_token_key().get_secret_value()
    path = tmp_path / "token.key"
    assert path.read_text().strip() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Settings(data_dir=tmp_path).resolve_token_key().get_secret_value() == first
    TokenCipher.from_setting(first)  # usable
    configured = generate_token_key()
    settings = Settings.from_sources(
        environ={"PARKWAY_TOKEN_KEY": configured, "PARKWAY_DATA_DIR": str(tmp_path)}
    )
    assert settings.resolve_token_key().get_secret_value() == configured


def test_settings_repr_hides_provider_json_and_token_key(tmp_path: Path) -> None:
    key = generate_token_key()
    settings = Settings.from_sources(
        environ={
            "PARKWAY_OAUTH_PROVIDERS": PROVIDERS_JSON,
            "PARKWAY_TOKEN_KEY": key,
            "PARKWAY_DATA_DIR": str(tmp_path),
        }
    )
    shown = repr(settings)
    assert key not in shown and SECRET not in shown and '"client_id"' not in shown
    assert settings.token_key is not None and settings.token_key.get_secret_value() == key
