"""One module per page; each has a ``router`` under ``/ui/p/{project}``."""

from fastapi import APIRouter

from attnprof.server.web.pages.bisections import router as bisection_page
from attnprof.server.web.pages.comparisons import router as comparisons_page
from attnprof.server.web.pages.fleet import router as fleet_page
from attnprof.server.web.pages.jobs import router as jobs_pages
from attnprof.server.web.pages.overview import router as overview
from attnprof.server.web.pages.portability import router as portability_page
from attnprof.server.web.pages.pulls import router as pulls_page
from attnprof.server.web.pages.runs import router as runs_page
from attnprof.server.web.pages.runs_list import router as runs_list_page
from attnprof.server.web.pages.trends import router as trends_page

# The overview comes first: its ``/jobs/state`` must match before the jobs page's ``/jobs/{job_id}``.
PAGE_ROUTERS: list[APIRouter] = [
    overview,
    trends_page,
    jobs_pages,
    runs_list_page,
    runs_page,
    pulls_page,
    comparisons_page,
    bisection_page,
    fleet_page,
    portability_page,
]
