"""What the sweeper reads from the broker before it resends: waiting and unacknowledged messages, on a real
Redis and on the folder transport of the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from service import queue
from service.config import Settings

REDIS_URL = "redis://127.0.0.1:6379/14"


@pytest.fixture
def on_redis() -> Settings:
    r = redis.Redis.from_url(REDIS_URL)
    r.flushdb()
    r.close()
    return Settings(broker_url=REDIS_URL)


def test_redis_waiting_and_unacknowledged_messages(on_redis: Settings) -> None:
    assert queue.enqueue_profile(on_redis, job_id="j1", attempt=1, testbed="tbq")
    assert queue.enqueue_profile(on_redis, job_id="j2", attempt=3, testbed="other")
    assert queue.enqueue_analysis(on_redis, job_id="j3")
    assert queue.pending(on_redis, "profile.tbq") == {("profile.run", ("j1", 1))}
    assert queue.pending(on_redis, "analysis") == {("analysis.run", ("j3",))}
    # A worker took it and has not acknowledged it (acks late): kombu moved it to the "unacked" hash.
    r = redis.Redis.from_url(REDIS_URL)
    raw = r.rpop("profile.tbq")
    r.hset("unacked", "tag-1", json.dumps([json.loads(raw), "profile.tbq", "profile.tbq"]))
    r.hset("unacked", "tag-2", b"not json")
    r.close()
    assert queue.pending(on_redis, "profile.tbq") == {("profile.run", ("j1", 1))}
    assert queue.pending(on_redis, "profile.nobody") == set()


def test_folder_broker(tmp_path: Path) -> None:
    settings = Settings(broker_url="filesystem://", broker_folder=str(tmp_path / "q"))
    assert queue.enqueue_profile(settings, job_id="j1", attempt=2, testbed="demo-cpu")
    assert queue.pending(settings, "profile.demo-cpu") == {("profile.run", ("j1", 2))}
    assert queue.pending(settings, "profile.demo") == set()  # a prefix of another queue's name is not it


def test_a_broker_that_cannot_be_read_this_way_answers_none() -> None:
    assert queue.pending(Settings(broker_url="amqp://guest@127.0.0.1:9//"), "analysis") is None
    assert queue.pending(Settings(broker_url="redis://127.0.0.1:9/0"), "analysis") is None  # down
