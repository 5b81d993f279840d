"""The demo project's attention: what a user's repository holds and `attnprof submit --source` bundles."""
