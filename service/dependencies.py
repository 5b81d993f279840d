"""Request-level dependencies shared by every domain (the session's lives in ``service.db``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.config import Settings


def settings_from_app(request: Request) -> Settings:
    """The settings the app was created with (tests build apps with their own)."""
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(settings_from_app)]
