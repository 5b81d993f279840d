"""Sign-in with GitHub: a pull request's reviewer, who has no attnprof token, opens the links they are given.

A second server over the test site's database, with a GitHub OAuth app whose GitHub is the stand-in of
``tests/server/github/fakegithub.py`` (GitHub's documented OAuth endpoints: authorize, access_token, /user,
/repos/{owner}/{repo}), which also receives the service's pull-request comments. The site's project names the
repository ``acme/attn``, the other project ``acme/other``. The whole flow runs in Chromium, from the link of a
comment the service posted; its failures (a tampered state, a refused code, GitHub down, a cancelled
authorisation) over HTTP, each answered by a page that says what happened, never a 500.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from attnprof.contract.links import Links
from attnprof.server.app import create_app
from attnprof.server.config import Dashboard, Settings
from attnprof.server.web.session import COOKIE, OAUTH_STATE_COOKIE, SessionSigner
from tests.server.github.fakegithub import FakeGitHub
from tests.server.stack import make_settings
from tests.server.web.stack import Site, _free_port, docs
from tests.worker.stack import allow_repo

CLIENT_ID = "Iv1.attnproftest"
CLIENT_SECRET = "oauth-app-secret-0123456789abcdef"
REPO, OTHER_REPO = "acme/attn", "acme/other"


@dataclass
class OAuthSite:
    url: str
    github: FakeGitHub
    signer: SessionSigner
    project: str
    other_project: str
    comparison: str
    run: str
    submit_token: str
    base_commit: str


@pytest.fixture(scope="module")
def oauth(site: Site) -> Iterator[OAuthSite]:
    with FakeGitHub() as github:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        settings = make_settings(
            site.db_url,
            public_url=url,
            github_api_url=github.url,
            github_web_url=github.url,
            github_client_id=CLIENT_ID,
            github_client_secret=CLIENT_SECRET,
            github_token="ghs_attnprofservicetoken0123456789",  # the service's own: commit statuses and comments
            dashboard=Dashboard(github_repositories={site.project: REPO, site.other_project: OTHER_REPO}),
        )
        app = create_app(settings)
        github.add_oauth_app(CLIENT_ID, CLIENT_SECRET, Links(url).ui_login_github_callback())
        github.add_token("ghs_attnprofservicetoken0123456789", "attnprof-bot")
        allow_repo(site.db_url, site.project, REPO)
        github.add_user("reviewer", repos=(REPO,))
        github.add_user("outsider")
        github.add_user("both-repos", repos=(REPO, OTHER_REPO))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the sign-in test server did not start in 30 s"
            time.sleep(0.05)
        try:
            yield OAuthSite(
                url=url,
                github=github,
                signer=app.state.session_signer,
                project=site.project,
                other_project=site.other_project,
                comparison=site.pr_comparison,
                run=site.pr_run,
                submit_token=site.tokens.submit,
                base_commit=f"{5:040x}",  # the newest of the site's default-branch commits
            )
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def _comment_link(oauth: OAuthSite) -> str:
    """A link as the pull-request comment gives it (``Links(public_url).ui_comparison``), with a query that must
    survive the sign-in."""
    assert oauth.comparison, "the site's pull-request upload made no comparison"
    return Links(oauth.url).ui_comparison(oauth.project, oauth.comparison) + "?view=all&case=a%5Bb%3Dc%5D"


def _posted_comment_link(oauth: OAuthSite, pr: int) -> str:
    """Upload a slower pull-request run naming the repository; the comparison link of the comment the service
    then posts on the pull request (to the GitHub stand-in)."""
    body = docs.upload_body(
        docs.h200(slower=1.25),
        branch="review",
        commit="d" * 40,
        base_commit=oauth.base_commit,
        repo=REPO,
        pr=pr,
    )
    headers = {"Authorization": f"Bearer {oauth.submit_token}"}
    answer = httpx.post(Links(oauth.url).api_results(oauth.project), json=body, headers=headers, timeout=60)
    assert answer.status_code == 201, answer.text
    deadline = time.monotonic() + 30
    while not oauth.github.comments(REPO, pr):
        assert time.monotonic() < deadline, "the service posted no comment on the pull request"
        time.sleep(0.1)
    comment = oauth.github.comments(REPO, pr)[0]["body"]
    found = re.search(r"\]\((http://[^)\s]+/comparisons/[^)\s]+)\)", comment)
    assert found is not None, comment[:800]
    assert found.group(1) == Links(oauth.url).ui_comparison(oauth.project, answer.json()["comparison_id"])
    return found.group(1)


# In the browser.


def test_a_reviewer_opens_a_comment_link_signs_in_with_github_and_lands_on_that_page(
    oauth: OAuthSite, page: Any
) -> None:
    tab = page
    oauth.github.sign_in_browser("reviewer")
    link = _posted_comment_link(oauth, pr=11)
    tab.goto(link)
    assert urlsplit(tab.url).path == "/ui/login"
    with tab.expect_navigation():
        tab.click("#github-sign-in")
    consent = urlsplit(tab.url)
    assert f"{consent.scheme}://{consent.netloc}" == oauth.github.url and consent.path == "/login/oauth/authorize"
    asked = parse_qs(consent.query)
    assert asked["client_id"] == [CLIENT_ID] and asked["scope"] == ["repo"] and len(asked["state"][0]) >= 32
    assert asked["redirect_uri"] == [Links(oauth.url).ui_login_github_callback()]
    with tab.expect_navigation():
        tab.click("#js-oauth-authorize-btn")
    tab.wait_for_load_state("load")
    assert tab.url == link
    header = tab.inner_text("header.top")
    assert "reviewer (GitHub) · read" in header
    # Read access only: no admin form is offered.
    assert tab.locator("form[action*='/baselines/']").count() == 0
    cookies = {c["name"]: c["value"] for c in tab.context.cookies()}
    assert OAUTH_STATE_COOKIE not in cookies, "the state is used once"
    assert "gho_" not in cookies[COOKIE], "GitHub's token is never kept"
    exchange = [r for r in oauth.github.requests("POST") if r.path == "/login/oauth/access_token"][-1]
    assert exchange.headers.get("Accept") == "application/json"


def test_a_github_user_who_cannot_read_the_repository_gets_no_project(oauth: OAuthSite, page: Any) -> None:
    tab = page
    oauth.github.sign_in_browser("outsider")
    tab.goto(_comment_link(oauth))
    with tab.expect_navigation():
        tab.click("#github-sign-in")
    with tab.expect_navigation():
        tab.click("#js-oauth-authorize-btn")
    tab.wait_for_load_state("load")
    # Signed in, but the comparison's project is not theirs: 404, exactly as for a token of another project.
    body = tab.inner_text("main")
    assert "no project" in body
    answer = tab.goto(Links(oauth.url).ui_project(oauth.project))
    assert answer.status == 404
    home = tab.goto(oauth.url + "/ui")
    assert home.status == 200
    text = tab.inner_text("main")
    assert "Signed in as outsider (GitHub)" in text and "None of this service's projects" in text


def test_a_tampered_state_is_refused_in_the_browser(oauth: OAuthSite, page: Any) -> None:
    tab = page
    oauth.github.add_user("second-reviewer", repos=(REPO,))  # not authorised yet: GitHub shows its consent page
    oauth.github.sign_in_browser("second-reviewer")
    tab.goto(_comment_link(oauth))
    with tab.expect_navigation():
        tab.click("#github-sign-in")
    # The state is changed on its way through GitHub.
    tab.eval_on_selector("input[name=state]", "(e) => { e.value = 'forged-' + e.value.slice(7); }")
    with tab.expect_navigation():
        tab.click("#js-oauth-authorize-btn")
    tab.wait_for_load_state("load")
    assert urlsplit(tab.url).path == "/ui/login/github/callback"
    assert "could not be checked" in tab.inner_text("main")
    cookies = {c["name"] for c in tab.context.cookies()}
    assert COOKIE not in cookies


# Over HTTP: the flow's steps and what goes wrong.


def _start(client: httpx.Client, oauth: OAuthSite, next_path: str) -> dict[str, str]:
    """Ask to sign in with GitHub; the authorize URL's query."""
    started = client.get(Links().ui_login_github(next_path))
    assert started.status_code == 302, started.text
    target = urlsplit(started.headers["location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{oauth.github.url}/login/oauth/authorize"
    return {k: v[-1] for k, v in parse_qs(target.query).items()}


def _authorize(oauth: OAuthSite, asked: dict[str, str], decision: str = "1") -> str:
    """The browser's visit to GitHub's consent page and its click: where GitHub sends it back."""
    with httpx.Client() as browser:
        form = browser.get(f"{oauth.github.url}/login/oauth/authorize", params=asked)
        if form.status_code == 302:  # authorised before: GitHub answers at once
            return str(form.headers["location"])
        assert form.status_code == 200 and "Authorize" in form.text
        back = browser.post(f"{oauth.github.url}/login/oauth/authorize", data={**asked, "authorize": decision})
        assert back.status_code == 302
        return str(back.headers["location"])


def _callback_path(location: str) -> str:
    parts = urlsplit(location)
    return f"{parts.path}?{parts.query}"


def _sign_in(client: httpx.Client, oauth: OAuthSite, login: str, next_path: str) -> httpx.Response:
    oauth.github.sign_in_browser(login)
    asked = _start(client, oauth, next_path)
    return client.get(_callback_path(_authorize(oauth, asked)))


def test_the_flow_over_http_grants_read_on_the_readable_projects_only(oauth: OAuthSite) -> None:
    target = f"/ui/p/{oauth.project}/runs/{oauth.run}?done=x"
    with httpx.Client(base_url=oauth.url) as client:
        first = client.get(target)
        assert first.status_code == 303
        form = client.get(first.headers["location"])
        assert "Sign in with GitHub" in form.text
        href = re.search(r'id="github-sign-in" href="([^"]+)"', form.text)
        assert href is not None and "next=" in href.group(1)
        back = _sign_in(client, oauth, "reviewer", target)
        assert back.status_code == 303 and back.headers["location"] == target
        assert client.get(target).status_code == 200
        assert client.get(f"/ui/p/{oauth.other_project}").status_code == 404
        # Never an admin: a baseline form is refused, whatever its form token.
        run_page = client.get(target)
        csrf = re.search(r'name="csrf" value="([^"]+)"', run_page.text)
        assert csrf is not None
        refused = client.post(
            f"/ui/p/{oauth.project}/runs/{oauth.run}/baselines/pin", data={"csrf": csrf.group(1), "reason": "x"}
        )
        assert refused.status_code == 403
        assert "cannot change baselines" in refused.text
    with httpx.Client(base_url=oauth.url) as client:
        assert _sign_in(client, oauth, "both-repos", "").status_code == 303
        assert client.get(f"/ui/p/{oauth.project}").status_code == 200
        assert client.get(f"/ui/p/{oauth.other_project}").status_code == 200
        home = client.get("/ui")
        assert home.status_code == 200 and oauth.project in home.text and oauth.other_project in home.text
        assert "Signed in as <strong>both-repos</strong> (GitHub)" in home.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', home.text)
        assert csrf is not None
        assert client.post("/ui/logout", data={"csrf": "forged"}).status_code == 403
        out = client.post("/ui/logout", data={"csrf": csrf.group(1)})
        assert out.status_code == 303 and COOKIE not in client.cookies
        assert client.get(f"/ui/p/{oauth.project}").headers["location"].startswith("/ui/login?next=")


def test_the_state_answers_once_and_only_in_the_browser_that_started(oauth: OAuthSite) -> None:
    with httpx.Client(base_url=oauth.url) as client:
        oauth.github.sign_in_browser("reviewer")
        asked = _start(client, oauth, f"/ui/p/{oauth.project}")
        callback = _callback_path(_authorize(oauth, asked))
        # Another browser (no state cookie) following the same callback is refused.
        with httpx.Client(base_url=oauth.url) as stranger:
            refused = stranger.get(callback)
            assert refused.status_code == 400 and "could not be checked" in refused.text
            assert COOKIE not in stranger.cookies
        assert client.get(callback).status_code == 303
        # The same callback again: its state was used.
        client.cookies.delete(COOKIE)
        again = client.get(callback)
        assert again.status_code == 400 and "could not be checked" in again.text
        assert COOKIE not in client.cookies
        # A state cookie signed by another key is forged.
        forged, _ = SessionSigner(b"x" * 32).issue_state("/ui/p/x", 600)
        client.cookies.set(OAUTH_STATE_COOKIE, forged, domain="127.0.0.1", path="/ui/login/github/callback")
        assert client.get(callback).status_code == 400


def test_a_refused_code_a_cancelled_authorisation_and_github_down_are_clear_pages(oauth: OAuthSite) -> None:
    with httpx.Client(base_url=oauth.url) as client:
        oauth.github.sign_in_browser("reviewer")
        asked = _start(client, oauth, "")
        bad = client.get("/ui/login/github/callback", params={"code": "0000", "state": asked["state"]})
        assert bad.status_code == 403
        assert "used already or expired" in bad.text  # bad_verification_code, in words
        assert COOKIE not in client.cookies
    with httpx.Client(base_url=oauth.url) as client:
        oauth.github.add_user("hesitant")
        oauth.github.sign_in_browser("hesitant")
        asked = _start(client, oauth, "")
        cancelled = client.get(_callback_path(_authorize(oauth, asked, decision="0")))
        assert cancelled.status_code == 403 and "cancelled on GitHub" in cancelled.text
        assert COOKIE not in client.cookies
    with httpx.Client(base_url=oauth.url) as client:
        oauth.github.sign_in_browser("reviewer")
        asked = _start(client, oauth, "")
        callback = _callback_path(_authorize(oauth, asked))
        oauth.github.fail_next("500")
        down = client.get(callback)
        assert down.status_code == 502 and "GitHub did not answer" in down.text
        assert "Sign in with GitHub" in down.text  # the way to try again
        assert COOKIE not in client.cookies


def test_a_session_past_its_check_goes_back_through_github_and_loses_a_revoked_repository(oauth: OAuthSite) -> None:
    github = oauth.github
    github.add_user("leaver", repos=(REPO,))
    target = f"/ui/p/{oauth.project}/trends?metric=latency"
    with httpx.Client(base_url=oauth.url) as client:
        assert _sign_in(client, oauth, "leaver", target).status_code == 303
        assert client.get(target).status_code == 200
        session = oauth.signer.read(client.cookies[COOKIE])
        assert session is not None and session.github_login == "leaver"
        # The same session, its check due.
        stale, _ = oauth.signer.issue_github(
            login="leaver",
            github_id=session.github_id or 0,
            project_ids=session.project_ids,
            ttl_s=60,
            now_s=time.time() - 120,
        )
        client.cookies.clear()
        client.cookies.set(COOKIE, stale, domain="127.0.0.1", path="/ui")
        github.revoke_access("leaver", REPO)
        again = client.get(target)
        assert again.status_code == 303
        assert again.headers["location"].startswith("/ui/login/github?next=")
        asked = _start(client, oauth, target)
        back = _authorize(oauth, asked)  # authorised before: GitHub sends the browser back without a click
        assert client.get(_callback_path(back)).status_code == 303
        assert client.get(target).status_code == 404


def test_without_an_oauth_app_there_is_no_github_sign_in(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        form = client.get("/ui/login")
        assert form.status_code == 200 and "Sign in with GitHub" not in form.text
        answer = client.get("/ui/login/github")
        assert answer.status_code == 404 and "GitHub sign-in is not set up" in answer.text
        callback = client.get("/ui/login/github/callback", params={"code": "x", "state": "y"})
        assert callback.status_code == 404


def test_settings_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="github_client_id and github_client_secret go together"):
        Settings(github_client_id="Iv1.x")
    with pytest.raises(ValueError, match="is not a GitHub repository"):
        Dashboard(github_repositories={"p": "not a repo"})
    with pytest.raises(ValueError, match="github_scope"):
        Dashboard(github_scope="admin:org")  # type: ignore[arg-type]


def _in_process(site: Site, github_url: str, **dashboard: Any) -> TestClient:
    """The app over the site's database, answering in this process at http://testserver."""
    settings = make_settings(
        site.db_url,
        public_url="http://testserver",
        github_api_url=github_url,
        github_web_url=github_url,
        github_client_id="Iv1.inprocess",
        github_client_secret=CLIENT_SECRET,
        dashboard=Dashboard(github_repositories={site.project: REPO}, **dashboard),
    )
    return TestClient(create_app(settings), follow_redirects=False)


def test_github_unreachable_is_a_502_page(site: Site) -> None:
    with _in_process(site, f"http://127.0.0.1:{_free_port()}") as client:  # nothing listens there
        started = client.get("/ui/login/github")
        state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
        down = client.get("/ui/login/github/callback", params={"code": "c0de", "state": state})
        assert down.status_code == 502
        assert "GitHub did not answer" in down.text and "ConnectError" in down.text
        assert COOKIE not in client.cookies


def test_without_the_repo_scope_a_private_repository_opens_nothing(oauth: OAuthSite, site: Site) -> None:
    oauth.github.add_oauth_app("Iv1.inprocess", CLIENT_SECRET, "http://testserver/ui/login/github/callback")
    oauth.github.add_user("private-reader", repos=(REPO,))
    oauth.github.sign_in_browser("private-reader")
    with _in_process(site, oauth.github.url, github_scope="") as client:
        started = client.get("/ui/login/github")
        asked = {k: v[-1] for k, v in parse_qs(urlsplit(started.headers["location"]).query).items()}
        assert "scope" not in asked
        back = client.get(_callback_path(_authorize(oauth, asked)))
        assert back.status_code == 303
        assert client.get(f"/ui/p/{site.project}").status_code == 404
        home = client.get("/ui")
        assert "Signed in as <strong>private-reader</strong>" in home.text and "None of this service" in home.text
    oauth.github.add_public_repo(REPO)
    try:
        with _in_process(site, oauth.github.url, github_scope="") as client:
            started = client.get("/ui/login/github")
            asked = {k: v[-1] for k, v in parse_qs(urlsplit(started.headers["location"]).query).items()}
            assert client.get(_callback_path(_authorize(oauth, asked))).status_code == 303
            assert client.get(f"/ui/p/{site.project}").status_code == 200  # public: anyone signed in reads it
    finally:
        oauth.github.state.public_repos.discard(REPO)
