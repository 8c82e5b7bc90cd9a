"""`mcpeval`: one entry point for every role — up, demo, api, worker, migrate — and the REST client
commands servers, cases, run, report and gate (`shared.client`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

from shared.client import add_client_commands
from shared.crypto import generate_service_key
from shared.embedded import embedded_stack, wait_for_port
from shared.settings import ENV_PREFIX, ConfigError, Settings, load_settings

log = logging.getLogger("mcpeval")

STOP_GRACE_SECONDS = 30.0  # more than a worker's drain grace, so `up` never kills a draining worker


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request line at INFO; URLs are fine but the volume is not.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)


def ensure_secret_key(settings: Settings) -> str:
    """MCPEVAL_SECRET_KEY if set, else the key kept in the data folder (created once, mode 0600)."""
    if settings.secret_key:
        return settings.secret_key
    path = settings.data_path / "secret.key"
    if not path.exists():
        settings.data_path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(generate_service_key())
    return path.read_text().strip()


@contextlib.contextmanager
def stack_urls(settings: Settings) -> Iterator[tuple[str, str]]:
    """The configured database and NATS urls, or an embedded PostgreSQL + NATS under the data folder."""
    if settings.database_url and settings.nats_url:
        yield settings.database_url, settings.nats_url
        return
    if settings.database_url or settings.nats_url:
        raise ConfigError("set both MCPEVAL_DATABASE_URL and MCPEVAL_NATS_URL, or neither (embedded stack)")
    with embedded_stack(settings.data_path, settings.pg_port, settings.nats_port) as urls:
        yield urls


class Children:
    """Processes started by `up`/`demo`, stopped together: SIGTERM, a grace period, then SIGKILL."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "shared.cli", *args], env=env)
        self.procs.append((name, proc))
        return proc

    def any_exited(self) -> str | None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                return f"{name} exited with code {proc.returncode}"
        return None

    def stop(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


class _StopRequestedError(Exception):
    pass


def _raise_stop(signum: int, _frame: object) -> None:
    # Once: a second Ctrl-C (or a forwarded SIGTERM) must not interrupt the orderly shutdown.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise _StopRequestedError(signal.Signals(signum).name)


@contextlib.contextmanager
def running_services(settings: Settings, workers: int) -> Iterator[tuple[str, Children]]:
    """Stack + migrations + API + workers; yields (api_url, the child processes); stops everything on exit."""
    from shared.db.migrate import upgrade

    _require_free_port(settings.api_host, settings.api_port)  # before starting anything heavy
    secret = ensure_secret_key(settings)
    with stack_urls(settings) as (database_url, nats_url):
        upgrade(database_url)
        env = dict(os.environ)
        env.update(
            {
                f"{ENV_PREFIX}DATABASE_URL": database_url,
                f"{ENV_PREFIX}NATS_URL": nats_url,
                f"{ENV_PREFIX}SECRET_KEY": secret,
                f"{ENV_PREFIX}DATA_DIR": str(settings.data_path),
                f"{ENV_PREFIX}LOG_LEVEL": settings.log_level,
            }
        )
        children = Children()
        try:
            api = children.start("api", ["api"], env)
            for index in range(workers):
                children.start(f"worker-{index + 1}", ["worker"], env)
            wait_for_port(settings.api_host, settings.api_port, 60, api)
            api_url = f"http://{settings.api_host}:{settings.api_port}"
            print(f"PostgreSQL  {_redact(database_url)}", flush=True)
            print(f"NATS        {nats_url}", flush=True)
            print(f"API         {api_url}  (OpenAPI UI: {api_url}/schema)", flush=True)
            print(f"Workers     {workers} process(es)", flush=True)
            print(f"Data folder {settings.data_path}", flush=True)
            yield api_url, children
        finally:
            children.stop()


def _require_free_port(host: str, port: int) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise ConfigError(f"{host}:{port} is in use; set MCPEVAL_API_PORT to another port") from None


def _redact(url: str) -> str:
    """Hide a password in a database url before printing it."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in creds else ''}@{host}"


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with running_services(settings, args.workers or settings.workers) as (_, children):
            print("mcpeval is up — Ctrl-C stops everything it started.", flush=True)
            while (exited := children.any_exited()) is None:
                time.sleep(0.5)
            print(f"{exited}: stopping the rest", file=sys.stderr, flush=True)
            return 1
    except _StopRequestedError as stop:
        print(f"\nstopping ({stop}) …", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped.", flush=True)
    return 0


def cmd_api(settings: Settings, _args: argparse.Namespace) -> int:
    import uvicorn

    from api_service.app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_keep_alive=30,  # longer than common client idle expiry: no race on a reused connection
        timeout_graceful_shutdown=int(STOP_GRACE_SECONDS) - 5,
    )
    return 0


def cmd_worker(settings: Settings, _args: argparse.Namespace) -> int:
    import asyncio

    from worker_service.main import run_worker

    asyncio.run(run_worker(settings))
    return 0


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from shared.db.migrate import downgrade, upgrade

    if not settings.database_url:
        raise ConfigError("MCPEVAL_DATABASE_URL is required for migrate")
    if args.downgrade:
        downgrade(settings.database_url, args.downgrade)
    else:
        upgrade(settings.database_url, args.revision)
    print("migrations applied", flush=True)
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    import msgspec

    from shared.demo.run import run_demo

    if not os.environ.get(f"{ENV_PREFIX}LOG_LEVEL"):
        # The demo's output is its report: service chatter only when asked for (MCPEVAL_LOG_LEVEL=INFO).
        settings = msgspec.structs.replace(settings, log_level="WARNING")
        logging.getLogger().setLevel(logging.WARNING)

    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return int(run_demo(settings, args))
    except _StopRequestedError as stop:
        print(f"\nstopped ({stop}).", flush=True)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcpeval", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="embedded (or configured) PostgreSQL + NATS, migrations, API and workers")
    up.add_argument("--workers", type=int, default=0, help="worker processes (default MCPEVAL_WORKERS or 1)")
    up.set_defaults(func=cmd_up)
    sub.add_parser("api", help="run the REST API (needs the database and NATS urls)").set_defaults(
        func=cmd_api
    )
    sub.add_parser("worker", help="run one worker process").set_defaults(func=cmd_worker)
    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.add_argument("--revision", default="head")
    migrate.add_argument("--downgrade", default=None, help="downgrade to this revision instead (e.g. base)")
    migrate.set_defaults(func=cmd_migrate)
    demo = sub.add_parser("demo", help="the stack + demo MCP servers + a sample suite + a summary table")
    demo.add_argument("--provider", default="baseline", help="baseline (offline, default) or a provider name")
    demo.add_argument("--model", default=None, help="model name (required unless --provider baseline)")
    demo.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint of the provider")
    demo.add_argument(
        "--api-key-env", default="MCPEVAL_DEMO_API_KEY", help="env var holding the model API key"
    )
    demo.add_argument("--samples", type=int, default=1, help="samples per run for measured confidence")
    demo.add_argument("--keep-running", action="store_true", help="keep the stack up after the report")
    demo.set_defaults(func=cmd_demo)
    add_client_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        configure_logging(settings.log_level)
        return int(args.func(settings, args))
    except ConfigError as exc:
        print(f"mcpeval: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
