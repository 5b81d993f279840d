"""Per-token rate limits: a token bucket per token, in this process's memory.

With several server processes each holds its own buckets, so the effective limit is the per-process limit
times the processes; a shared limit would need Redis, which the embedded mode does not have.
"""

from __future__ import annotations

import threading
import time


class RateLimiter:
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
