"""Who may read a kernel's source (service/visibility.py), over HTTP on SQLite and PostgreSQL.

The verdict is public, the kernel is not: every route and page that could carry a source is asked as four
viewers (no key, another submitter's key, the submitter's key, the admin key) under the three ways a source
becomes readable by anyone: never (the default), its submitter's `public` flag, and the operator's
JUDGE_SOURCES_PUBLIC_AFTER.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from service.core.config import Settings
from service.db.models import Submission, utcnow
from service.db.session import Database
from service.main import create_app
from service.visibility import ADMIN, ANONYMOUS, SourceAccess, Viewer, can_see_source, source_access
from tests.service.conftest import ADMIN_KEY, CORRECT_KL_DIV, new_key

SOURCE = CORRECT_KL_DIV.read_text()
NDJSON = {"Content-Type": "application/x-ndjson"}


def marked() -> tuple[str, str]:
    """A candidate carrying a marker no other text contains: finding the marker in an answer finds the source."""
    marker = f"marker-{uuid.uuid4().hex}"
    return marker, f"{SOURCE}\n# {marker}\n"


class Viewers:
    """Headers of the four viewers: no key, another submitter, the submitter (alice), the admin key."""

    def __init__(self, db: Database) -> None:
        self.anonymous: dict[str, str] = {}
        self.other = {"Authorization": f"Bearer {new_key(db, 'bob')}"}
        self.owner = {"Authorization": f"Bearer {new_key(db, 'alice')}"}
        self.owner_second_key = {"Authorization": f"Bearer {new_key(db, 'alice')}"}
        self.admin = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def viewers(db: Database) -> Viewers:
    return Viewers(db)


@pytest.fixture
def app_with(settings: Settings) -> Iterator[Callable[..., TestClient]]:
    """A client of an app whose settings differ from the test's in the given fields."""
    opened: list[TestClient] = []

    def make(**changes: object) -> TestClient:
        client = TestClient(create_app(settings.model_copy(update=changes)))
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def submit(client: TestClient, headers: dict, source: str, **fields: object) -> str:
    response = client.post("/v1/submissions", json={"task": "kl_div", "source": source, **fields}, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def source_statuses(client: TestClient, viewers: Viewers, sub_id: str) -> dict[str, int]:
    return {name: client.get(f"/v1/submissions/{sub_id}/source", headers=getattr(viewers, name)).status_code
            for name in ("anonymous", "other", "owner", "owner_second_key", "admin")}


PRIVATE = {"anonymous": 401, "other": 404, "owner": 200, "owner_second_key": 200, "admin": 200}
PUBLIC = dict.fromkeys(PRIVATE, 200)


def page_shows(client: TestClient, sub_id: str, marker: str) -> bool:
    page = client.get(f"/submissions/{sub_id}")
    assert page.status_code == 200
    return marker in page.text


def set_created_at(db: Database, sub_id: str, when: dt.datetime) -> None:
    with db.transaction() as session:
        session.get(Submission, sub_id).created_at = when


# --- the policy, on its own ------------------------------------------------------------------------

class Sent:
    def __init__(self, submitter: str = "alice", public: bool = False,
                 created_at: dt.datetime = dt.datetime(2026, 6, 1)) -> None:
        self.submitter, self.public, self.created_at = submitter, public, created_at


@pytest.mark.parametrize("sent,viewer,public_after,now,expected", [
    (Sent(), ANONYMOUS, None, None, SourceAccess.PRIVATE),
    (Sent(), Viewer(submitter="bob"), None, None, SourceAccess.PRIVATE),
    (Sent(), Viewer(submitter="alice"), None, None, SourceAccess.SUBMITTER),
    (Sent(), ADMIN, None, None, SourceAccess.ADMIN),
    (Sent(public=True), ANONYMOUS, None, None, SourceAccess.PUBLIC),
    # The operator's date: sent before it and past it is published; before it passes, or sent after, is not.
    (Sent(), ANONYMOUS, dt.datetime(2026, 7, 1), dt.datetime(2026, 7, 1), SourceAccess.PUBLISHED),
    (Sent(), ANONYMOUS, dt.datetime(2026, 7, 1), dt.datetime(2026, 6, 30, 23, 59), SourceAccess.PRIVATE),
    (Sent(created_at=dt.datetime(2026, 7, 2)), ANONYMOUS, dt.datetime(2026, 7, 1), dt.datetime(2026, 8, 1),
     SourceAccess.PRIVATE),
    (Sent(created_at=dt.datetime(2026, 7, 1)), ANONYMOUS, dt.datetime(2026, 7, 1), dt.datetime(2026, 8, 1),
     SourceAccess.PRIVATE),
])
def test_the_policy_decides_by_viewer_flag_and_date(sent, viewer, public_after, now, expected):
    assert source_access(sent, viewer, public_after, now) is expected
    assert can_see_source(sent, viewer, public_after, now) is (expected is not SourceAccess.PRIVATE)


def test_the_setting_reads_a_date_or_a_zoned_time_as_naive_utc(monkeypatch):
    monkeypatch.setenv("JUDGE_SOURCES_PUBLIC_AFTER", "2026-12-31")
    assert Settings().sources_public_after == dt.datetime(2026, 12, 31)
    monkeypatch.setenv("JUDGE_SOURCES_PUBLIC_AFTER", "2026-12-31T18:00:00+01:00")
    assert Settings().sources_public_after == dt.datetime(2026, 12, 31, 17)
    monkeypatch.delenv("JUDGE_SOURCES_PUBLIC_AFTER")
    assert Settings().sources_public_after is None


# --- over HTTP --------------------------------------------------------------------------------------

def test_a_source_is_private_by_default_on_the_api_and_the_page(client, viewers):
    marker, source = marked()
    sub_id = submit(client, viewers.owner, source)
    assert source_statuses(client, viewers, sub_id) == PRIVATE
    mine = client.get(f"/v1/submissions/{sub_id}/source", headers=viewers.owner).json()
    assert mine["source"] == source
    anonymous = client.get(f"/v1/submissions/{sub_id}/source")
    assert "private" in anonymous.json()["detail"] and anonymous.headers["www-authenticate"] == "Bearer"
    view = client.get(f"/v1/submissions/{sub_id}").json()
    assert view["public"] is False and view["source_public"] is False
    # The page has no login: the verdict page says why the source is missing and how it becomes visible.
    page = client.get(f"/submissions/{sub_id}").text
    assert marker not in page and 'data-access="private"' in page
    assert f"PATCH /v1/submissions/{sub_id}" in page and "private to its submitter" in page
    # A key that is not one (a typo, a revoked key) is told so, not treated as no key.
    assert client.get(f"/v1/submissions/{sub_id}/source",
                      headers={"Authorization": "Bearer kj_nope"}).status_code == 401


def test_public_when_sent_as_json_as_text_and_in_a_batch(client, viewers):
    marker, source = marked()
    sub_id = submit(client, viewers.owner, source, public=True)
    assert source_statuses(client, viewers, sub_id) == PUBLIC
    assert client.get(f"/v1/submissions/{sub_id}").json()["public"] is True
    assert page_shows(client, sub_id, marker)

    text_marker, text_source = marked()
    response = client.post("/v1/submissions", content=text_source, params={"task": "kl_div", "public": "true"},
                           headers={**viewers.owner, "Content-Type": "text/plain"})
    assert response.status_code == 202, response.text
    assert source_statuses(client, viewers, response.json()["id"]) == PUBLIC
    assert page_shows(client, response.json()["id"], text_marker)

    lines = [marked(), marked()]
    body = "\n".join(json.dumps({"task": "kl_div", "source": text, "public": i == 0})
                     for i, (_, text) in enumerate(lines)) + "\n"
    batch = client.post("/v1/batches", content=body, headers={**viewers.owner, **NDJSON})
    assert batch.status_code == 202, batch.text
    results = client.get(f"{batch.json()['url']}/results").text
    rows = [json.loads(line) for line in results.splitlines()]
    assert len(rows) == 2 and all(m not in results for m, _ in lines)  # results never carry a source
    assert source_statuses(client, viewers, rows[0]["submission_id"]) == PUBLIC
    assert source_statuses(client, viewers, rows[1]["submission_id"]) == PRIVATE


@pytest.mark.parametrize("bad", [1, "true", "yes", None])
def test_public_is_a_json_boolean_only(client, viewers, bad):
    response = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE, "public": bad},
                           headers=viewers.owner)
    assert response.status_code == 422 and response.json()["errors"][0]["loc"][-1] == "public"
    text = client.post("/v1/submissions", content=SOURCE, params={"task": "kl_div", "public": "1"},
                       headers={**viewers.owner, "Content-Type": "text/plain"})
    assert text.status_code == 422


def test_its_submitter_or_an_admin_makes_it_public_later_and_private_again(client, viewers):
    marker, source = marked()
    sub_id = submit(client, viewers.owner, source)
    url = f"/v1/submissions/{sub_id}"
    assert client.patch(url, json={"public": True}).status_code == 401
    assert client.patch(url, json={"public": True}, headers=viewers.other).status_code == 404
    assert client.patch("/v1/submissions/nope", json={"public": True}, headers=viewers.owner).status_code == 404
    assert client.patch(url, json={"public": 1}, headers=viewers.owner).status_code == 422
    assert client.patch(url, json={}, headers=viewers.owner).status_code == 422
    assert source_statuses(client, viewers, sub_id) == PRIVATE

    made = client.patch(url, json={"public": True}, headers=viewers.owner_second_key)
    assert made.status_code == 200 and made.json()["public"] is True and made.json()["source_public"] is True
    assert source_statuses(client, viewers, sub_id) == PUBLIC and page_shows(client, sub_id, marker)

    assert client.patch(url, json={"public": False}, headers=viewers.admin).json()["source_public"] is False
    assert source_statuses(client, viewers, sub_id) == PRIVATE and not page_shows(client, sub_id, marker)
    assert client.patch(url, json={"public": True}, headers=viewers.admin).json()["public"] is True


def test_the_operators_date_publishes_what_was_sent_before_it(app_with, db, viewers):
    now = utcnow()
    before, after = marked(), marked()
    client = app_with(sources_public_after=now - dt.timedelta(days=1))
    early = submit(client, viewers.owner, before[1])
    set_created_at(db, early, now - dt.timedelta(days=2))  # sent during the competition
    late = submit(client, viewers.owner, after[1])  # sent after it ended

    assert source_statuses(client, viewers, early) == PUBLIC
    view = client.get(f"/v1/submissions/{early}").json()
    assert view["public"] is False and view["source_public"] is True
    page = client.get(f"/submissions/{early}").text
    assert before[0] in page and 'data-access="published"' in page
    assert source_statuses(client, viewers, late) == PRIVATE and not page_shows(client, late, after[0])
    # Private again by its submitter does not unpublish it: the operator's date wins.
    client.patch(f"/v1/submissions/{early}", json={"public": False}, headers=viewers.owner)
    assert source_statuses(client, viewers, early) == PUBLIC

    # Before the date passes, the page says when the source will be shown.
    coming = app_with(sources_public_after=now + dt.timedelta(days=1))
    assert source_statuses(coming, viewers, early) == PRIVATE
    page = coming.get(f"/submissions/{early}").text
    assert before[0] not in page and "when the operator publishes every source sent before then" in page


def test_no_other_route_or_page_carries_a_private_source(app_with, viewers):
    client = app_with(sse_max_s=0)  # the event stream sends its first event and ends (no worker here)
    marker, source = marked()
    sub_id = submit(client, viewers.owner, source, model="m", tags=["t"])
    batch_marker, batch_source = marked()
    batch = client.post("/v1/batches", content=json.dumps({"task": "kl_div", "source": batch_source}) + "\n",
                        headers={**viewers.owner, **NDJSON}).json()
    paths = [f"/v1/submissions/{sub_id}", f"/v1/submissions/{sub_id}/events", "/v1/submissions?limit=50",
             f"/v1/batches/{batch['id']}", f"/v1/batches/{batch['id']}/results",
             f"/v1/batches/{batch['id']}/results?format=csv", f"/v1/batches/{batch['id']}/metrics", "/v1/batches",
             "/v1/leaderboard/kl_div", f"/submissions/{sub_id}", f"/batches/{batch['id']}", "/leaderboard/kl_div",
             "/"]
    for name in ("anonymous", "other", "owner", "admin"):
        for path in paths:
            answer = client.get(path, headers=getattr(viewers, name))
            assert marker not in answer.text and batch_marker not in answer.text, (name, path)


def test_the_document_says_who_may_call_what(client):
    spec = client.get("/openapi.json").json()
    source = spec["paths"]["/v1/submissions/{submission_id}/source"]["get"]
    assert {} in source["security"] and {"bearer": []} in source["security"]  # a key, or none for a public source
    assert "401" in source["responses"] and "404" in source["responses"]
    patch = spec["paths"]["/v1/submissions/{submission_id}"]["patch"]
    assert {} not in patch["security"] and {"bearer": []} in patch["security"]
    assert patch["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SubmissionUpdate"}
    assert spec["components"]["schemas"]["SubmissionUpdate"]["properties"]["public"]["type"] == "boolean"
    created = spec["paths"]["/v1/submissions"]["post"]
    assert created["requestBody"]["content"]["application/json"]["schema"]["properties"]["public"]["type"] == "boolean"
    assert {p["name"] for p in created["parameters"]} >= {"public"}

