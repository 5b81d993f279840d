"""Request-level dependencies shared by every domain (the session's lives in ``attnprof.server.db``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import Depends, Request
from starlette.applications import Starlette

from attnprof.server.config import Settings


def settings_from_app(request: Request) -> Settings:
    """The settings the app was created with (tests build apps with their own)."""
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(settings_from_app)]


FeedbackSender = Callable[[Sequence[str]], None]
"""Delivers the GitHub feedback that the given jobs owe (the app's ``attnprof.server.github.outbox.Sender``). A request
that made feedback owed adds it as a background task, so it runs once the transaction is committed and the answer
is sent: no request waits on GitHub, and the domains that change a job's state need not import
``attnprof.server.github``."""


def feedback_sender_of(app: Starlette) -> FeedbackSender:
    sender: FeedbackSender = app.state.send_feedback
    return sender


def feedback_sender(request: Request) -> FeedbackSender:
    return feedback_sender_of(request.app)


FeedbackDep = Annotated[FeedbackSender, Depends(feedback_sender)]
