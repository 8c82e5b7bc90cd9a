"""`create_app()`: the Litestar application — controllers, error mapping, OpenAPI and the service clients."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import ScalarRenderPlugin, SwaggerRenderPlugin
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncSession

from api_service.batches import BatchController
from api_service.common import Services, ServicesDep
from api_service.errors import exception_handlers
from api_service.health import HealthController
from api_service.mcp_servers import McpServerController
from api_service.metrics import MetricsController
from api_service.prometheus import PrometheusController
from api_service.similarity import SimilarityController
from api_service.test_cases import TestCaseController
from api_service.test_runs import RunController, TestRunController
from api_service.tools import ToolController
from shared.crypto import load_service_key
from shared.db.engine import make_engine, make_sessionmaker
from shared.messaging import connect, ensure_streams
from shared.settings import ConfigError, Settings

log = logging.getLogger("mcpeval.api")


def create_app(settings: Settings) -> Litestar:
    """The API for one process. Needs database_url, nats_url and secret_key in the settings."""
    if not settings.database_url or not settings.nats_url or not settings.secret_key:
        raise ConfigError("MCPEVAL_DATABASE_URL, MCPEVAL_NATS_URL and MCPEVAL_SECRET_KEY are required")
    service_key = load_service_key(settings.secret_key)
    services_box: list[Services] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        assert settings.database_url
        assert settings.nats_url
        engine = make_engine(settings.database_url, settings.db_pool_size)
        nc = await connect(settings.nats_url, name="mcpeval-api")
        js: JetStreamContext = nc.jetstream(timeout=5)
        await ensure_streams(js, settings)
        services_box.append(
            Services(
                settings=settings,
                engine=engine,
                sessionmaker=make_sessionmaker(engine),
                nats=nc,
                js=js,
                service_key=service_key,
            )
        )
        try:
            yield
        finally:
            try:
                await nc.drain()
            except Exception:
                # NATS is down (drain refuses while reconnecting): close, or the reconnect task outlives the loop.
                with contextlib.suppress(Exception):
                    await nc.close()
            await engine.dispose()

    def provide_services() -> Services:
        return services_box[0]

    async def provide_session(services: ServicesDep) -> AsyncIterator[AsyncSession]:
        async with services.sessionmaker() as session:
            yield session

    return Litestar(
        route_handlers=[
            HealthController,
            McpServerController,
            ToolController,
            TestCaseController,
            RunController,
            BatchController,
            TestRunController,
            MetricsController,
            PrometheusController,
            SimilarityController,
        ],
        dependencies={
            "services": Provide(provide_services, sync_to_thread=False),
            "session": Provide(provide_session),
        },
        exception_handlers=exception_handlers,
        lifespan=[lifespan],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="mcpeval",
            version="0.1.0",
            description="Does the LLM pick the right MCP tool, on the right server, with the right arguments?",
            path="/schema",
            render_plugins=[ScalarRenderPlugin(), SwaggerRenderPlugin(path="/swagger")],
        ),
        debug=False,
    )
