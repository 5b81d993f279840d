"""GitHub feedback: commit statuses, the pull-request comment, and the webhook (docs/architecture.md,
"GitHub feedback")."""
