"""``attnprof.server.asgi:app`` for ASGI servers started with several workers (settings from the environment)."""

from attnprof.server.app import create_app

app = create_app()
