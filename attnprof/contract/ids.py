"""The ids that cross between the processes, as types of their own: a job's id and a run's id are both strings on
the wire, never interchangeable in the code that carries them.

``NewType``s: free at run time (a ``JobId`` is its ``str``), checked by mypy, and validated as ``str`` by pydantic
where a contract model declares one. An id is made one where it enters a process: from a task message's argument
(the profile worker), from an answer's model (the worker, the CI client), from a row (the service, where it builds
a contract answer).
"""

from __future__ import annotations

from typing import NewType

# A job's id (a UUID as text): what ``profile.run`` names, the ``{job_id}`` of the worker routes and of
# ``/api/v1/jobs/{job_id}``.
JobId = NewType("JobId", str)
# A stored run's id (a UUID as text; not the result document's own ``run.id``): the ``{run_id}`` of
# ``/api/v1/projects/{project}/runs/{run_id}``.
RunId = NewType("RunId", str)
