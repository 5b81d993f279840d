"""``python -m attnprof.core``: the local verbs, without the ``attnprof`` entry point."""

from attnprof.core.cli import main

main()
