"""Async engine and session factory, made once per process from the settings."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine


def make_engine(
    database_url: str, pool_size: int = 10, max_overflow: int | None = None, pre_ping: bool = True
) -> AsyncEngine:
    """An asyncpg engine with bounded pool, statement timeout and connect timeout.

    `pre_ping` costs a round trip per checkout; the worker turns it off because a stale connection only
    fails one delivery, which is retried."""
    return create_async_engine(
        database_url,
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        pool_pre_ping=pre_ping,
        pool_timeout=10,
        connect_args={
            "timeout": 10,
            "command_timeout": 30,
            "server_settings": {"application_name": "mcpeval"},
        },
    )


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)
