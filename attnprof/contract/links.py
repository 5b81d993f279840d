"""Every URL of the service that anything hands out or requests, built in one place from its route paths.

Two kinds, one method each per kind of page:

- ``api_*``: the API's routes (``/api/v1/...``), for programs that send a token: an API answer's ``url`` fields,
  the CI client's requests.
- ``ui_*``: the dashboard's pages (``/ui/...``), for people with a browser session: the pull-request comment, the
  commit status's target, the job summary, the CLI's output, the pages' own links.

``Links(base)`` puts ``base`` (the service's public URL) before every path; ``PATHS`` (no base) gives the
site-relative paths that a page's links and an HTTP client with a base URL use. Path parts are percent-quoted, so
an id or name is always one path segment. ``API_ROUTES`` and ``PAGE_ROUTES`` hold the route templates used here;
a test checks each against the service's routes. Framework-free (the standard library only): the service, the CI
client and the workers import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote, urlencode

API_ROUTES = {
    "token": "/api/v1/token",
    "results": "/api/v1/projects/{project}/results",
    "jobs": "/api/v1/projects/{project}/jobs",
    "job": "/api/v1/jobs/{job_id}",
    "job_comparison": "/api/v1/jobs/{job_id}/comparison",
    "job_comment": "/api/v1/jobs/{job_id}/comment",
    "job_cancel": "/api/v1/jobs/{job_id}/cancel",
    "runs": "/api/v1/projects/{project}/runs",
    "run": "/api/v1/projects/{project}/runs/{run_id}",
    "trace": "/api/v1/projects/{project}/runs/{run_id}/traces/{name}",
    "comparison": "/api/v1/projects/{project}/comparisons/{comparison_id}",
    "trends": "/api/v1/projects/{project}/trends",
    "github_resend": "/api/v1/github/jobs/{job_id}/resend",
}
PAGE_ROUTES = {
    "home": "/ui",
    "login": "/ui/login",
    "login_github": "/ui/login/github",
    "login_github_callback": "/ui/login/github/callback",
    "logout": "/ui/logout",
    "static": "/ui/static/{name}",
    "project": "/ui/p/{project}",
    "jobs": "/ui/p/{project}/jobs",
    "fleet": "/ui/p/{project}/fleet",
    "portability": "/ui/p/{project}/portability",
    "job": "/ui/p/{project}/jobs/{job_id}",
    "job_states": "/ui/p/{project}/jobs/state",
    "runs": "/ui/p/{project}/runs",
    "pull": "/ui/p/{project}/pulls/{number}",
    "run": "/ui/p/{project}/runs/{run_id}",
    "run_comparison": "/ui/p/{project}/runs/{run_id}/comparison",
    "trace": "/ui/p/{project}/runs/{run_id}/traces/{name}",
    "run_rule": "/ui/p/{project}/runs/{run_id}/baselines/{kind}",
    "run_rule_remove": "/ui/p/{project}/runs/{run_id}/baselines/{kind}/remove",
    "comparison": "/ui/p/{project}/comparisons/{comparison_id}",
    "comparison_rule": "/ui/p/{project}/comparisons/{comparison_id}/baselines/{kind}",
    "comparison_rule_remove": "/ui/p/{project}/comparisons/{comparison_id}/baselines/{kind}/remove",
    "trends": "/ui/p/{project}/trends",
    "alert_ack": "/ui/p/{project}/alerts/{alert_id}/acknowledgement",
    "bisection": "/ui/p/{project}/bisections/{bisection_id}",
    "alert_bisect": "/ui/p/{project}/alerts/{alert_id}/bisect",
}
Query = str | int | None


class Links:
    """The URLs under ``base`` (a public URL such as ``https://perf.example``; "" for site-relative paths)."""

    def __init__(self, base: str = "") -> None:
        self.base = base.rstrip("/")

    def _url(self, template: str, query: dict[str, Query] | None = None, **parts: str) -> str:
        path = template.format(**{name: quote(str(value), safe="") for name, value in parts.items()})
        kept = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        return f"{self.base}{path}" + (f"?{urlencode(kept)}" if kept else "")

    # The API: for programs, with a token.

    def api_token(self) -> str:
        return self._url(API_ROUTES["token"])

    def api_results(self, project: str) -> str:
        return self._url(API_ROUTES["results"], project=project)

    def api_jobs(self, project: str, **query: Query) -> str:
        return self._url(API_ROUTES["jobs"], query, project=project)

    def api_job(self, job_id: str) -> str:
        return self._url(API_ROUTES["job"], job_id=job_id)

    def api_job_comparison(self, job_id: str) -> str:
        return self._url(API_ROUTES["job_comparison"], job_id=job_id)

    def api_job_comment(self, job_id: str) -> str:
        return self._url(API_ROUTES["job_comment"], job_id=job_id)

    def api_job_cancel(self, job_id: str) -> str:
        return self._url(API_ROUTES["job_cancel"], job_id=job_id)

    def api_runs(self, project: str, **query: Query) -> str:
        return self._url(API_ROUTES["runs"], query, project=project)

    def api_run(self, project: str, run_id: str) -> str:
        return self._url(API_ROUTES["run"], project=project, run_id=run_id)

    def api_trace(self, project: str, run_id: str, name: str) -> str:
        return self._url(API_ROUTES["trace"], project=project, run_id=run_id, name=name)

    def api_comparison(self, project: str, comparison_id: str) -> str:
        return self._url(API_ROUTES["comparison"], project=project, comparison_id=comparison_id)

    def api_trends(self, project: str, **query: Query) -> str:
        return self._url(API_ROUTES["trends"], query, project=project)

    def api_github_resend(self, job_id: str) -> str:
        return self._url(API_ROUTES["github_resend"], job_id=job_id)

    # The dashboard: for people, signed in.

    def ui_home(self) -> str:
        return self._url(PAGE_ROUTES["home"])

    def ui_login(self, next_path: str | None = None) -> str:
        """The sign-in form, which comes back to ``next_path`` (a path on this site) once signed in."""
        login = self._url(PAGE_ROUTES["login"])
        return f"{login}?next={quote(next_path, safe='/')}" if next_path else login

    def ui_login_github(self, next_path: str | None = None) -> str:
        """Sign-in with GitHub, which comes back to ``next_path`` (a path on this site) once signed in."""
        login = self._url(PAGE_ROUTES["login_github"])
        return f"{login}?next={quote(next_path, safe='/')}" if next_path else login

    def ui_login_github_callback(self) -> str:
        """Where GitHub sends the browser back (the OAuth app's callback URL: ``Links(public_url)``'s)."""
        return self._url(PAGE_ROUTES["login_github_callback"])

    def ui_logout(self) -> str:
        return self._url(PAGE_ROUTES["logout"])

    def ui_static(self, name: str) -> str:
        return self._url(PAGE_ROUTES["static"], name=name)

    def ui_project(self, project: str) -> str:
        """The project's overview: testbeds, the default branch's latest runs, alerts, jobs."""
        return self._url(PAGE_ROUTES["project"], project=project)

    def ui_fleet(self, project: str) -> str:
        """The fleet: each testbed's hosts, queue, waits, utilisation and GPU time."""
        return self._url(PAGE_ROUTES["fleet"], project=project)

    def ui_portability(self, project: str, **query: Query) -> str:
        """Two runs (``a``, ``b``) on two GPU models: what the hardware explains, what the code does worse."""
        return self._url(PAGE_ROUTES["portability"], query, project=project)

    def ui_jobs(self, project: str, **query: Query) -> str:
        return self._url(PAGE_ROUTES["jobs"], query, project=project)

    def ui_job(self, project: str, job_id: str) -> str:
        return self._url(PAGE_ROUTES["job"], project=project, job_id=job_id)

    def ui_job_states(self, project: str, job_ids: Iterable[str]) -> str:
        """What the pages with jobs in progress poll (JSON)."""
        return self._url(PAGE_ROUTES["job_states"], {"ids": ",".join(job_ids)}, project=project)

    def ui_runs(self, project: str, **query: Query) -> str:
        """The project's runs, jobs' and uploads alike; ``branch``, ``pr``, ``testbed`` and ``before`` as the query."""
        return self._url(PAGE_ROUTES["runs"], query, project=project)

    def ui_pull(self, project: str, number: int) -> str:
        """A pull request's page: its jobs and uploads, the latest verdict first."""
        return self._url(PAGE_ROUTES["pull"], project=project, number=str(number))

    def ui_run(self, project: str, run_id: str) -> str:
        return self._url(PAGE_ROUTES["run"], project=project, run_id=run_id)

    def ui_run_comparison(self, project: str, run_id: str) -> str:
        """The run's newest comparison (a redirect to its page)."""
        return self._url(PAGE_ROUTES["run_comparison"], project=project, run_id=run_id)

    def ui_trace(self, project: str, run_id: str, name: str) -> str:
        """A stored trace of the run, as a download."""
        return self._url(PAGE_ROUTES["trace"], project=project, run_id=run_id, name=name)

    def ui_run_rule(self, project: str, run_id: str, kind: str, remove: bool = False) -> str:
        """Where an admin's form adds (or removes) the baseline rule ``kind`` (pin, exclude, accept) on the run."""
        template = PAGE_ROUTES["run_rule_remove" if remove else "run_rule"]
        return self._url(template, project=project, run_id=run_id, kind=kind)

    def ui_comparison(self, project: str, comparison_id: str) -> str:
        return self._url(PAGE_ROUTES["comparison"], project=project, comparison_id=comparison_id)

    def ui_comparison_rule(self, project: str, comparison_id: str, kind: str, remove: bool = False) -> str:
        """Where an admin's form accepts the comparison's candidate (``kind`` accept), or takes that back."""
        template = PAGE_ROUTES["comparison_rule_remove" if remove else "comparison_rule"]
        return self._url(template, project=project, comparison_id=comparison_id, kind=kind)

    def ui_trends(self, project: str, **query: Query) -> str:
        """The trends page; ``case``, ``metric`` and the page's other parameters as the query."""
        return self._url(PAGE_ROUTES["trends"], query, project=project)

    def ui_bisection(self, project: str, bisection_id: int) -> str:
        """A bisection's page: its probes, what is left to search, what it found."""
        return self._url(PAGE_ROUTES["bisection"], project=project, bisection_id=str(bisection_id))

    def ui_alert_bisect(self, project: str, alert_id: int) -> str:
        """Where a submit or admin token's form starts a bisection of alert ``alert_id``'s step."""
        return self._url(PAGE_ROUTES["alert_bisect"], project=project, alert_id=str(alert_id))

    def ui_alert_ack(self, project: str, alert_id: int) -> str:
        """Where an admin's form acknowledges alert ``alert_id`` (from the trends page)."""
        return self._url(PAGE_ROUTES["alert_ack"], project=project, alert_id=str(alert_id))


PATHS = Links()
