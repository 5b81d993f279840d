from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, utcnow


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    default_branch: Mapped[str] = mapped_column(String(255), default="main", server_default="main")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
