"""What the sweeper reads from the broker before it resends: waiting and unacknowledged messages, on a real
Redis and on the folder transport of the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from attnprof.contract import tasks
from attnprof.server import queue
from attnprof.server.config import Settings

REDIS_URL = "redis://127.0.0.1:6379/14"


@pytest.fixture
def on_redis() -> Settings:
    r = redis.Redis.from_url(REDIS_URL)
    r.flushdb()
    r.close()
    return Settings(broker_url=REDIS_URL)


def _offer(job_id: str, attempt: int, testbed: str, secret: str = "apc_s") -> tasks.ProfileMessage:
    return tasks.ProfileMessage(job_id=job_id, attempt=attempt, testbed=testbed, claim_secret=secret)


def test_redis_waiting_and_unacknowledged_messages(on_redis: Settings) -> None:
    assert queue.enqueue_profile(on_redis, _offer("j1", 1, "tbq", "apc_one"))
    assert queue.enqueue_profile(on_redis, _offer("j2", 3, "other"))
    assert queue.enqueue_analysis(on_redis, job_id="j3")
    assert queue.pending(on_redis, "profile.tbq") == queue.Pending(
        waiting=frozenset({("profile.run", ("j1", 1, "apc_one"))})
    )
    assert queue.pending(on_redis, "analysis") == queue.Pending(waiting=frozenset({("analysis.run", ("j3",))}))
    # A worker took it and has not acknowledged it (acks late): kombu moved it to the "unacked" hash.
    r = redis.Redis.from_url(REDIS_URL)
    raw = r.rpop("profile.tbq")
    r.hset("unacked", "tag-1", json.dumps([json.loads(raw), "profile.tbq", "profile.tbq"]))
    r.hset("unacked", "tag-2", b"not json")
    r.close()
    found = queue.pending(on_redis, "profile.tbq")
    assert found == queue.Pending(unacked=frozenset({("profile.run", ("j1", 1, "apc_one"))}))
    assert found.all == {("profile.run", ("j1", 1, "apc_one"))}
    assert queue.pending(on_redis, "profile.nobody") == queue.Pending()


def test_what_celery_shows_of_a_profile_message_holds_no_secret(on_redis: Settings) -> None:
    assert queue.enqueue_profile(on_redis, _offer("j9", 2, "tbs", "apc_do_not_show"))
    r = redis.Redis.from_url(REDIS_URL)
    (raw,) = r.lrange("profile.tbs", 0, -1)
    r.close()
    headers = json.loads(raw)["headers"]
    assert headers["argsrepr"] == "['j9', 2, '<claim secret>']"
    assert "apc_do_not_show" not in repr(_offer("j9", 2, "tbs", "apc_do_not_show"))


def test_folder_broker(tmp_path: Path) -> None:
    settings = Settings(broker_url="filesystem://", broker_folder=str(tmp_path / "q"))
    assert queue.enqueue_profile(settings, _offer("j1", 2, "demo-cpu"))
    assert queue.pending(settings, "profile.demo-cpu") == queue.Pending(
        waiting=frozenset({("profile.run", ("j1", 2, "apc_s"))})
    )
    assert queue.pending(settings, "profile.demo") == queue.Pending()  # a prefix of another queue's name is not it


def test_a_broker_that_cannot_be_read_this_way_answers_none() -> None:
    assert queue.pending(Settings(broker_url="amqp://guest@127.0.0.1:9//"), "analysis") is None
    assert queue.pending(Settings(broker_url="redis://127.0.0.1:9/0"), "analysis") is None  # down
