"""``python -m profiler_core``: the local verbs, without the ``attnprof`` entry point."""

from profiler_core.cli import main

main()
