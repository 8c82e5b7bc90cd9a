"""The deployment files: compose.yaml wires postgres, nats, migrate, api and a scalable worker; the image is slim
and runs unprivileged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.settings import env_var_names

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """compose.yaml parsed with PyYAML (anchors and merge keys resolved)."""
    assert COMPOSE.is_file(), f"{COMPOSE} is missing"
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict), "compose.yaml must be a mapping"
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict), "compose.yaml has no services"
    return found


def as_text(value: Any) -> str:
    """A compose command/entrypoint (string or list) as one string."""
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    """A service's environment, from either the mapping or the list (KEY=VALUE) form."""
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return {str(k): None if v is None else str(v) for k, v in env.items()}
    out: dict[str, str | None] = {}
    for item in env:
        key, sep, value = str(item).partition("=")
        out[key] = value if sep else None
    return out


def test_compose_has_the_five_services(services: dict[str, dict[str, Any]]) -> None:
    """compose.yaml defines postgres, nats, migrate, api and worker."""
    assert {"postgres", "nats", "migrate", "api", "worker"} <= set(services)


def test_postgres_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    """The postgres service declares a healthcheck (others wait on it) and keeps its data in a volume."""
    postgres = services["postgres"]

    healthcheck = postgres.get("healthcheck")

    assert isinstance(healthcheck, dict), "postgres needs a healthcheck"
    assert healthcheck.get("test"), "postgres healthcheck needs a test command"
    assert postgres.get("volumes"), "postgres data should live in a volume"


def test_nats_runs_jetstream_with_a_volume(services: dict[str, dict[str, Any]]) -> None:
    """The nats service enables JetStream (-js) and stores its data in a volume."""
    nats = services["nats"]

    command = as_text(nats.get("command")) + " " + as_text(nats.get("entrypoint"))

    assert re.search(r"(^|\s)(-js|--jetstream)(\s|$)", command), f"nats command lacks -js: {command!r}"
    assert nats.get("volumes"), "nats needs a volume for the JetStream store"


def test_migrate_is_one_shot(services: dict[str, dict[str, Any]]) -> None:
    """The migrate service runs once: no restart policy, or restart "no"."""
    restart = services["migrate"].get("restart")

    assert restart in (None, "no", False), f"migrate must not restart, got {restart!r}"


def test_api_and_worker_wait_for_the_migration(services: dict[str, dict[str, Any]]) -> None:
    """api and worker start only after migrate has completed successfully."""
    for name in ("api", "worker"):
        depends = services[name].get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}.depends_on should use the long form with conditions"
        assert "migrate" in depends, f"{name} must depend on migrate"
        assert depends["migrate"].get("condition") == "service_completed_successfully"


def test_worker_can_be_scaled(services: dict[str, dict[str, Any]]) -> None:
    """The worker has no fixed container_name and publishes no host port, so --scale worker=N works."""
    worker = services["worker"]

    ports = [str(p) for p in worker.get("ports") or []]

    assert "container_name" not in worker
    assert all(":" not in p for p in ports), f"worker publishes fixed host ports: {ports}"


def test_compose_environment_uses_only_known_settings(services: dict[str, dict[str, Any]]) -> None:
    """Every MCPEVAL_* variable the compose file sets is one the settings read (no typos, no dead knobs)."""
    known = set(env_var_names())

    used = {
        (name, key)
        for name, service in services.items()
        for key in environment(service)
        if key.startswith("MCPEVAL_")
    }

    assert used, "no service sets any MCPEVAL_* variable"
    assert sorted((n, k) for n, k in used if k not in known) == []


def test_services_get_the_required_settings(services: dict[str, dict[str, Any]]) -> None:
    """api and worker get the database url, the NATS url and the secret key; migrate gets the database url."""
    for name, required in (
        ("api", {"MCPEVAL_DATABASE_URL", "MCPEVAL_NATS_URL", "MCPEVAL_SECRET_KEY"}),
        ("worker", {"MCPEVAL_DATABASE_URL", "MCPEVAL_NATS_URL", "MCPEVAL_SECRET_KEY"}),
        ("migrate", {"MCPEVAL_DATABASE_URL"}),
    ):
        missing = required - set(environment(services[name]))
        assert not missing, f"{name} lacks {sorted(missing)}"


def test_dockerfile_is_slim_and_unprivileged() -> None:
    """deploy/Dockerfile builds from a slim base and switches to a non-root USER for the final stage."""
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]

    bases = [line.split()[1] for line in lines if line.upper().startswith("FROM ")]
    users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]

    assert bases, "no FROM line"
    assert "slim" in bases[-1], f"final stage base is not slim: {bases[-1]}"
    assert users, "no USER line: the image would run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), f"final USER is root: {users[-1]}"


def test_dockerfile_environment_uses_only_known_settings() -> None:
    """Every MCPEVAL_* variable the Dockerfile sets is one the settings read."""
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"

    used = set(re.findall(r"\bMCPEVAL_[A-Z0-9_]+", DOCKERFILE.read_text()))

    assert sorted(used - set(env_var_names())) == []
