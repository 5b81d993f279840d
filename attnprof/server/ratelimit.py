"""Per-token rate limits: a token bucket per token (``ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE`` refills it,
``ATTNPROF_RATE_LIMIT__BURST`` is its size).

With a Redis broker (the deployment) the buckets live in that Redis and every server process takes from the same
one, so ``attnprof serve --workers N`` and several hosts behind one proxy still allow a token the configured rate,
not N times it. One script per request reads, refills and takes from the bucket atomically, on the Redis server's
clock (so hosts whose clocks differ agree). The embedded mode (the folder broker, no Redis) keeps the buckets in
each process's memory: there the limit is per process, and ``attnprof serve`` says so when it starts.

A Redis that does not answer does not stop the API: the request is counted in the process's own bucket instead (the
limit is per process until Redis is back), and the log says so once a minute.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from attnprof.server.config import Settings

log = logging.getLogger(__name__)

# KEYS[1]: the bucket; ARGV: refill rate (tokens per second), size. Answers the seconds to wait, 0 when allowed, as
# text (a Lua number would be truncated to an integer on its way back).
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local last = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""
_WARN_EVERY_S = 60.0


class LocalRateLimiter:
    """Token buckets in this process's memory."""

    def __init__(self, *, requests_per_minute: float, burst: int) -> None:
        self.rate_per_s = requests_per_minute / 60.0
        self.burst = float(burst)
        self._buckets: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: int) -> float:
        """Take one request from ``key``'s bucket: 0 when allowed, else seconds until one is available."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate_per_s)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate_per_s


class RedisRateLimiter:
    """Token buckets in Redis, shared by every process that uses the same Redis and database."""

    def __init__(self, *, redis_url: str, namespace: str, requests_per_minute: float, burst: int) -> None:
        import redis

        # Short timeouts: a request waits at most this long for a Redis that hangs before it is counted locally.
        self._redis = redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._take: Any = self._redis.register_script(_TAKE)
        self.prefix = f"attnprof:ratelimit:{namespace}:"
        self.rate_per_s = requests_per_minute / 60.0
        self.burst = burst
        self.fallback = LocalRateLimiter(requests_per_minute=requests_per_minute, burst=burst)
        self._warned_at = -_WARN_EVERY_S

    def hit(self, key: int) -> float:
        """Take one request from ``key``'s bucket: 0 when allowed, else seconds until one is available."""
        try:
            return float(self._take(keys=[f"{self.prefix}{key}"], args=[repr(self.rate_per_s), self.burst]))
        except Exception as exc:  # Redis is down or slow: limit per process rather than refuse or let all through
            now = time.monotonic()
            if now - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = now
                log.warning("rate limit: Redis did not answer (%s: %s); limiting per process", type(exc).__name__, exc)
            return self.fallback.hit(key)


RateLimiter = LocalRateLimiter | RedisRateLimiter


def make_rate_limiter(settings: Settings) -> RateLimiter:
    """Shared buckets in the broker's Redis where the broker is Redis, else buckets per process."""
    limit = settings.rate_limit
    if settings.broker_url.startswith(("redis://", "rediss://")):
        # Token ids are a database's: buckets of two databases (two deployments, or test databases) on one Redis
        # must not meet.
        namespace = hashlib.sha256(settings.database_url.encode()).hexdigest()[:16]
        return RedisRateLimiter(
            redis_url=settings.broker_url,
            namespace=namespace,
            requests_per_minute=limit.requests_per_minute,
            burst=limit.burst,
        )
    return LocalRateLimiter(requests_per_minute=limit.requests_per_minute, burst=limit.burst)


def describe(settings: Settings, processes: int) -> str:
    """The effective limit, in words, for ``processes`` server processes (what ``attnprof serve`` prints)."""
    limit = settings.rate_limit
    per = f"{limit.requests_per_minute:g} requests/min per token, bursts of {limit.burst}"
    if settings.broker_url.startswith(("redis://", "rediss://")):
        return f"rate limit: {per}, shared by every server process through the broker's Redis"
    if processes == 1:
        return f"rate limit: {per} (one process; buckets in its memory)"
    return (
        f"rate limit: {per} in each of the {processes} processes (buckets in memory, no Redis): up to "
        f"{limit.requests_per_minute * processes:g} requests/min and bursts of {limit.burst * processes} per token"
    )
