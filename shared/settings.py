"""Settings read once from `MCPEVAL_*` environment variables and passed down explicitly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

ENV_PREFIX = "MCPEVAL_"


class ConfigError(ValueError):
    """An environment variable holds a value the service cannot use."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of the service. Field `foo_bar` is read from `MCPEVAL_FOO_BAR`."""

    database_url: str | None = None
    nats_url: str | None = None
    secret_key: str | None = None
    data_dir: str = ".mcpeval"
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    pg_port: int = 0
    nats_port: int = 0
    workers: int = 1
    worker_concurrency: int = 64
    log_level: str = "INFO"
    max_body_bytes: int = 1_048_576
    ack_wait_seconds: float = 60.0
    max_deliver: int = 5
    run_deadline_seconds: int = 3600
    key_ttl_seconds: int = 3600
    mcp_timeout_seconds: float = 15.0
    tool_cache_seconds: float = 0.0
    confidence_threshold: float = 0.7
    db_pool_size: int = 10
    retry_base_delay_seconds: float = 2.0
    sweep_interval_seconds: float = 30.0
    similarity_timeout_seconds: float = 60.0
    prices: str = ""
    """JSON `{"model": [usd_per_1M_input_tokens, usd_per_1M_output_tokens]}`: the cost column of the metrics."""
    max_batch_runs: int = 10_000

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).resolve()

    def price_table(self) -> dict[str, tuple[float, float]]:
        """`prices` parsed: model → (input, output) US dollars per million tokens; ConfigError if malformed."""
        if not self.prices.strip():
            return {}
        try:
            table = msgspec.json.decode(self.prices.encode(), type=dict[str, tuple[float, float]])
        except msgspec.DecodeError as exc:
            raise ConfigError(
                f'{ENV_PREFIX}PRICES must be JSON like {{"gpt-4o": [2.5, 10]}}: {exc}'
            ) from None
        return {model: (float(p[0]), float(p[1])) for model, p in table.items()}


_INT_FIELDS = {name for name, typ in Settings.__annotations__.items() if typ == "int"}
_FLOAT_FIELDS = {name for name, typ in Settings.__annotations__.items() if typ == "float"}


def env_var_names() -> list[str]:
    """All environment variables the settings read (compose files are checked against this)."""
    return [ENV_PREFIX + name.upper() for name in Settings.__struct_fields__]


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings from the environment; empty values count as unset."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name in Settings.__struct_fields__:
        raw = env.get(ENV_PREFIX + name.upper(), "").strip()
        if not raw:
            continue
        try:
            if name in _INT_FIELDS:
                values[name] = int(raw)
            elif name in _FLOAT_FIELDS:
                values[name] = float(raw)
            else:
                values[name] = raw
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a number, got {raw!r}") from None
    settings = Settings(**values)  # type: ignore[arg-type]
    for name in ("worker_concurrency", "max_deliver", "workers", "db_pool_size"):
        if getattr(settings, name) < 1:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be at least 1")
    if not 0.0 < settings.confidence_threshold <= 1.0:
        raise ConfigError(f"{ENV_PREFIX}CONFIDENCE_THRESHOLD must be in (0, 1]")
    settings.price_table()
    return settings
