"""JetStream streams, subjects and consumers shared by the API (publisher) and the workers (consumers)."""

from __future__ import annotations

import uuid

import msgspec
import nats
from nats.aio.client import Client as NatsClient
from nats.errors import NoServersError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from shared.messages import CheckRequest, RunRequest
from shared.settings import Settings

RUNS_STREAM = "RUNS"
RUNS_SUBJECT = "mcpeval.runs.execute"
RUNS_DURABLE = "run-workers"
CHECKS_STREAM = "CHECKS"
CHECKS_SUBJECT = "mcpeval.checks.execute"
CHECKS_DURABLE = "check-workers"
RUN_FINISHED_PREFIX = "mcpeval.runs.finished"
SIMILARITY_SUBJECT = "mcpeval.similarity.request"
SIMILARITY_QUEUE = "similarity-workers"

DUPLICATE_WINDOW_SECONDS = 600.0
MAX_QUEUED_MESSAGES = 1_000_000
PUBLISH_TIMEOUT_SECONDS = 5.0


class PublishError(RuntimeError):
    """JetStream did not acknowledge a message: it may not have been stored."""


def run_finished_subject(run_id: str) -> str:
    return f"{RUN_FINISHED_PREFIX}.{run_id}"


async def connect(url: str, name: str) -> NatsClient:
    """Connect with bounded timeouts and endless reconnects (a restarting NATS must not kill a service)."""
    try:
        return await nats.connect(
            url,
            name=name,
            connect_timeout=5,
            reconnect_time_wait=1,
            max_reconnect_attempts=-1,
            allow_reconnect=True,
            drain_timeout=10,
        )
    except NoServersError as exc:  # nats-py raises this with no detail: name the url (no credentials)
        raise ConnectionError(f"cannot reach NATS at {url.split('@')[-1]}") from exc


async def ensure_streams(js: JetStreamContext, settings: Settings) -> None:
    """Create or update the work-queue streams (idempotent; every service calls it at start)."""
    for name, subject, max_age in (
        (RUNS_STREAM, RUNS_SUBJECT, float(settings.run_deadline_seconds)),
        (CHECKS_STREAM, CHECKS_SUBJECT, 3600.0),
    ):
        config = StreamConfig(
            name=name,
            subjects=[subject],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            discard=DiscardPolicy.NEW,
            duplicate_window=DUPLICATE_WINDOW_SECONDS,
            max_age=max_age,
            max_msgs=MAX_QUEUED_MESSAGES,
        )
        try:
            await js.stream_info(name)
            await js.update_stream(config)
        except NotFoundError:
            await js.add_stream(config)


def consumer_config(durable: str, subject: str, settings: Settings) -> ConsumerConfig:
    """The ONE durable pull consumer that every worker replica shares for a stream."""
    return ConsumerConfig(
        durable_name=durable,
        filter_subject=subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=settings.ack_wait_seconds,
        max_deliver=settings.max_deliver,
        max_ack_pending=100_000,
        max_waiting=512,
    )


async def publish_run(js: JetStreamContext, run_id: str, sealed_api_key: str | None) -> None:
    """Publish a run request; Nats-Msg-Id = run id makes a retried publish a no-op."""
    body = msgspec.json.encode(RunRequest(run_id=run_id, sealed_api_key=sealed_api_key))
    await _publish(js, RUNS_SUBJECT, body, run_id)


async def publish_check(js: JetStreamContext, server_id: str, requested_at: float) -> None:
    body = msgspec.json.encode(CheckRequest(server_id=server_id, requested_at=requested_at))
    await _publish(js, CHECKS_SUBJECT, body, f"check-{server_id}-{uuid.uuid4()}")


async def _publish(js: JetStreamContext, subject: str, body: bytes, msg_id: str) -> None:
    try:
        await js.publish(subject, body, timeout=PUBLISH_TIMEOUT_SECONDS, headers={"Nats-Msg-Id": msg_id})
    except Exception as exc:
        raise PublishError(f"JetStream did not store the message on {subject}: {type(exc).__name__}") from exc
