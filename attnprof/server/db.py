"""Database plumbing: the declarative base (with a naming convention), column types that run on Postgres and
SQLite alike, the engine, and the request-scoped session dependency (the request owns the transaction)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

import pydantic_core
from fastapi import Depends, Request
from sqlalchemy import JSON, BigInteger, DateTime, Engine, Integer, MetaData, create_engine, event, make_url
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.pool import QueuePool
from sqlalchemy.types import TypeDecorator
from starlette.applications import Starlette

from attnprof.contract.worker_api import INT_MAX as INT_MAX  # Postgres integer's largest: bounds ids from requests

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on Postgres (documents are kept whole and queried rarely), JSON text on SQLite.
JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on both backends (SQLite keeps no zone: it is added back on read)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def insert_for(session: Session) -> Any:
    """The dialect's ``insert`` (Postgres' or SQLite's), which has ``on_conflict_do_nothing``."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSONType,
        list[Any]: JSONType,
        datetime: UTCDateTime(),
    }


def _json_dumps(value: Any) -> str:
    # Documents are large (a 100-case result is over 1 MB, mostly floats): pydantic's encoder writes them some
    # eight times faster than json.dumps, and from_json reads them three times faster than json.loads.
    return pydantic_core.to_json(value).decode()


# INSERT ... RETURNING, which job submission and testbed creation use, came in SQLite 3.35.
SQLITE_MIN = (3, 35)
# A database host that does not answer at all (not one that refuses) would hold a request until the kernel gives up
# on the connection, minutes later; bounded, it is a 503 the client retries. A URL's own connect_timeout wins.
CONNECT_TIMEOUT_S = 10


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; on SQLite, foreign keys on and connections usable from the server's threads."""
    kwargs.setdefault("json_serializer", _json_dumps)
    kwargs.setdefault("json_deserializer", pydantic_core.from_json)
    if url.startswith("sqlite"):
        if sqlite3.sqlite_version_info < SQLITE_MIN:
            raise RuntimeError(
                f"SQLite {sqlite3.sqlite_version} is too old for the embedded mode: it needs "
                f"{'.'.join(map(str, SQLITE_MIN))} or newer (INSERT ... RETURNING); Python uses the system's library"
            )
        engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    if "connect_timeout" not in make_url(url).query:
        kwargs.setdefault("connect_args", {"connect_timeout": CONNECT_TIMEOUT_S})
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10, **kwargs)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def session_slots(engine: Engine) -> int:
    """How many requests may hold a session at once: as many as the pool keeps connections open (10 by default).

    Not the overflow too: an overflow connection is closed when it is returned, so sustained concurrency past the
    pool's size would open a Postgres backend (a fork, authentication, cold caches) for nearly every request.
    """
    pool = engine.pool
    return max(1, pool.size()) if isinstance(pool, QueuePool) else 10


def _slots(app: Starlette) -> asyncio.Semaphore:
    slots: asyncio.Semaphore | None = getattr(app.state, "session_slots", None)
    if slots is None:
        slots = app.state.session_slots = asyncio.Semaphore(session_slots(app.state.engine))
    return slots


@asynccontextmanager
async def session_slot(app: Starlette) -> AsyncIterator[None]:
    """Wait, on the event loop, for one of the app's session slots; hold it until the session is closed.

    Most endpoints and their dependencies are sync: each runs on a thread of the server's pool (40), and a request
    holds its connection from its first query (the token) across several of them until its session closes. With
    more requests in flight than the pool has connections, every thread could end up blocked on the pool while
    the requests holding the connections wait for a thread to go on: nothing moves until the pool's 30 s timeout
    (seen at 100 job creations per second). Waiting here, where no thread is held, bounds the sessions by the
    connections, so no thread ever waits on the pool.
    """
    async with _slots(app):
        yield


async def _session_slot(request: Request) -> AsyncIterator[None]:
    async with session_slot(request.app):
        yield


@contextmanager
def request_session(app: Starlette) -> Iterator[Session]:
    """The session of one request: committed when the block ends, rolled back when it raises. Tests bind their
    own (``app.state.bound_session``: a session in a transaction they roll back), which is then neither opened
    nor closed here. The hook is here rather than in a dependency override because the job submission, written
    out for speed, opens its session without dependency injection; both paths go through this function."""
    bound: Session | None = getattr(app.state, "bound_session", None)
    factory: sessionmaker[Session] = app.state.sessionmaker
    with nullcontext(bound) if bound is not None else factory() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def get_session(
    request: Request, _slot: Annotated[None, Depends(_session_slot, scope="function")]
) -> Iterator[Session]:
    """One session per request; committed when the endpoint returns, rolled back when it raises."""
    with request_session(request.app) as session:
        yield session


# scope="function": the commit happens before the response is sent, so a 2xx means the data is stored.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
