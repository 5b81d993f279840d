"""The application factory."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from attnprof.server.audit.address import ClientAddressMiddleware
from attnprof.server.comparisons import alert_outbox
from attnprof.server.config import Settings, get_settings
from attnprof.server.db import make_engine, make_sessionmaker, request_session
from attnprof.server.errors import install_handlers
from attnprof.server.github.outbox import Sender as FeedbackSender
from attnprof.server.limits import BodyGateMiddleware, BodyLimitMiddleware
from attnprof.server.metrics import Metrics, MetricsMiddleware
from attnprof.server.openapi import LICENSE, SERVERS, operation_id
from attnprof.server.openapi import install as install_openapi
from attnprof.server.preauth import check as preauth_check
from attnprof.server.query import known_query_only
from attnprof.server.ratelimit import make_rate_limiter
from attnprof.server.routers import ROUTERS
from attnprof.server.timing import ServerTimingMiddleware
from attnprof.server.web.router import install as install_web


def create_app(settings: Settings | None = None) -> FastAPI:
    """A FastAPI app bound to ``settings`` (the environment's by default) and its own engine."""
    settings = settings or get_settings()
    engine = make_engine(settings.database_url)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # What exists at start-up (modules, the app, its routes) lives as long as the process: moved out of
        # the collector's generations, full collections no longer walk it on every page (~17 ms of a trend
        # page's 45 ms of CPU on the benchmark database).
        gc.freeze()
        yield
        engine.dispose()

    app = FastAPI(
        title="attnprof",
        version="1",
        summary="Performance-regression CI for attention kernels",
        license_info=LICENSE,
        servers=SERVERS,
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = make_sessionmaker(engine)
    # New alerts sent straight after a request's commit go where this app's settings say (not the environment's).
    app.state.sessionmaker.configure(info={alert_outbox.NOTIFY_INFO: (settings.alert_webhooks, settings.public_url)})
    app.state.rate_limiter = make_rate_limiter(settings)
    app.state.metrics = Metrics()
    app.state.testbed_ids = {}  # name -> id, read from committed rows (see attnprof.server.jobs.service.create)
    # GitHub feedback a request made owed, delivered once it has answered
    # (``attnprof.server.dependencies.FeedbackDep``).
    app.state.send_feedback = FeedbackSender(lambda: request_session(app), settings)
    install_handlers(app)
    for router in ROUTERS:
        app.include_router(router, dependencies=[Depends(known_query_only)])
    install_web(app, settings)
    install_openapi(app)
    app.add_middleware(
        BodyLimitMiddleware,
        json_bytes=settings.limits.json_body_bytes,
        bundle_bytes=settings.limits.bundle_bytes,
        trace_bytes=settings.limits.trace_bytes,
    )
    # Outside the size limit, which reads a chunked body whole: credentials are checked before any of it is read.
    app.add_middleware(
        BodyGateMiddleware,
        check=preauth_check,
        max_unfinished=settings.limits.unfinished_bodies,
        min_rate_bytes_s=settings.limits.body_min_rate_bytes_s,
    )
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(ServerTimingMiddleware)
    app.add_middleware(ClientAddressMiddleware, trusted_proxies=settings.trusted_proxies)
    return app
