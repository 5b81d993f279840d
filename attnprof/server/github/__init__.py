"""GitHub feedback: commit statuses, the pull-request comment, and the webhook (DESIGN 3.4)."""
