"""The rate limiter's buckets on the tests' real Redis: limiters of one deployment (as in two server processes) take
from one bucket, another database's do not, the wait they answer is the bucket's arithmetic, and a Redis that does
not answer leaves each process its own bucket."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from attnprof.server.config import RateLimit
from attnprof.server.ratelimit import LocalRateLimiter, RedisRateLimiter, make_rate_limiter
from tests.server.stack import REDIS_URL, make_settings


def _limiter(namespace: str, *, url: str = REDIS_URL, per_minute: float = 60.0, burst: int = 3) -> RedisRateLimiter:
    return RedisRateLimiter(redis_url=url, namespace=namespace, requests_per_minute=per_minute, burst=burst)


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    r = redis.Redis.from_url(REDIS_URL)
    for key in r.scan_iter(f"attnprof:ratelimit:{name}:*"):
        r.delete(key)
    r.close()


def test_two_limiters_of_one_deployment_share_a_bucket(namespace: str) -> None:
    first, second = _limiter(namespace), _limiter(namespace)
    waits = [limiter.hit(7) for limiter in (first, second, first, second, first)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    # One request a second refills it: the 4th waits about a second, the 5th no less (it was refused, took nothing).
    assert 0.9 < waits[3] <= 1.0 and 0.9 < waits[4] <= 1.0
    assert second.hit(8) == 0.0  # another token has its own bucket
    assert _limiter(f"{namespace}-other").hit(7) == 0.0  # another database's token 7 is another token


def test_a_bucket_refills_at_the_configured_rate(namespace: str) -> None:
    limiter = _limiter(namespace, per_minute=6000.0, burst=1)  # 100 a second
    assert limiter.hit(1) == 0.0
    wait_s = limiter.hit(1)
    assert 0.0 < wait_s <= 0.01
    key = f"attnprof:ratelimit:{namespace}:1"
    ttl_ms = redis.Redis.from_url(REDIS_URL).pttl(key)
    assert 0 < ttl_ms <= 1010  # a full bucket is no bucket: the key goes once it would have refilled


def test_a_redis_that_does_not_answer_leaves_a_bucket_per_process(namespace: str) -> None:
    down = _limiter(namespace, url="redis://127.0.0.1:1/0", burst=2)
    assert [down.hit(5) > 0 for _ in range(3)] == [False, False, True]


def test_the_deployment_shares_and_the_embedded_mode_keeps_its_own() -> None:
    limit = RateLimit(requests_per_minute=120, burst=4)
    shared = make_rate_limiter(make_settings("sqlite:///a.db", rate_limit=limit))
    assert isinstance(shared, RedisRateLimiter) and (shared.rate_per_s, shared.burst) == (2.0, 4)
    embedded = make_rate_limiter(make_settings("sqlite:///a.db", rate_limit=limit, broker_url="filesystem://"))
    assert isinstance(embedded, LocalRateLimiter) and (embedded.rate_per_s, embedded.burst) == (2.0, 4.0)
