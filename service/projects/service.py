from __future__ import annotations

import re

from sqlalchemy.orm import Session

from service.errors import Conflict, InvalidPayload
from service.projects import repository
from service.projects.models import Project

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


def create(session: Session, *, name: str, default_branch: str = "main") -> Project:
    if not _NAME.match(name):
        raise InvalidPayload(f"project name {name!r}: lowercase letters, digits, '.', '_' and '-', at most 100")
    if repository.get_by_name(session, name) is not None:
        raise Conflict(f"project {name!r} exists")
    return repository.add(session, name=name, default_branch=default_branch)
