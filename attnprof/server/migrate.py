"""Run the Alembic migrations that ship inside the package, from any working directory."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

SCRIPT_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str | None = None, *, connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_DIR))
    if url is not None:
        # ConfigParser interpolation: a literal % in a password must be doubled.
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: str | None = None, revision: str = "head", *, connection: Connection | None = None) -> None:
    command.upgrade(alembic_config(url, connection=connection), revision)


def downgrade(url: str | None = None, revision: str = "base", *, connection: Connection | None = None) -> None:
    command.downgrade(alembic_config(url, connection=connection), revision)


def current_head() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()
