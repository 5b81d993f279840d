"""Where the code under test came from: its commit and branch, the repository, the pull request, and the base commit
with its first-parent ancestors (where the baseline is looked for). Each field's rule is written here once.

Used on both sides of the wire, so that a value is judged the same way by each: the CI client (``attnprof submit``,
``attnprof upload`` and the action's step check what they are about to send, and say which field is wrong) and the
service (the job submission's form, the result upload's body: a 422 naming the field; a job's and a run's
provenance; the database columns are as long as the bounds here). Framework-free: pydantic only.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

INT_MAX = 2**31 - 1  # Postgres ``integer``: pull request numbers are stored in one
COMMIT_CHARS = 64  # a SHA-256 object name (a SHA-1 one has 40)
BRANCH_CHARS = 255
REPO_CHARS = 200
ANCESTORS_MAX = 50  # the service's ``ATTNPROF_LIMITS__ANCESTORS`` may accept fewer
COMMIT_PATTERN = r"^[0-9A-Za-z._-]+$"
REPO_PATTERN = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"

Commit = Annotated[str, StringConstraints(min_length=1, max_length=COMMIT_CHARS, pattern=COMMIT_PATTERN)]
"""A commit hash (or a name that stands for one): letters, digits, ``.``, ``_``, ``-``."""
Branch = Annotated[str, StringConstraints(min_length=1, max_length=BRANCH_CHARS)]
Repo = Annotated[str, StringConstraints(max_length=REPO_CHARS, pattern=REPO_PATTERN)]
"""A GitHub repository, ``owner/name``."""
PullRequest = Annotated[int, Field(ge=1, le=INT_MAX)]


class Provenance(BaseModel):
    """Where a job's or a run's code came from. Its fields are the JSON fields of a result upload and the text
    fields of a job submission (where ``ancestors`` is one field: a JSON list or CSV)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    branch: Branch
    commit: Commit
    repo: Repo | None = Field(None, description="owner/name")
    base_commit: Commit | None = Field(None, description="merge base with the default branch")
    ancestors: tuple[Commit, ...] = Field(
        (), max_length=ANCESTORS_MAX, description="first-parent ancestors of the base commit, newest first"
    )
    pr: PullRequest | None = None


def refusal(exc: ValidationError) -> str:
    """What ``exc`` refused, field by field, in the words of the service's 422 (``commit: String should match
    pattern ...``; the service puts ``body.`` before the field)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(provenance)'}: {err['msg']}" for err in exc.errors()[:10]
    )
