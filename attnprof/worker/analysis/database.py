"""Sessions for the tasks that use the database (analysis, sweep): one engine per process, made on first use.

A profile worker never calls this: it holds no database credentials.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy.orm import Session, sessionmaker

from attnprof.server.db import make_engine, make_sessionmaker


@lru_cache(maxsize=4)
def sessions(database_url: str) -> sessionmaker[Session]:
    return make_sessionmaker(make_engine(database_url))
