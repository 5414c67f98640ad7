"""The viewer's review loop over real HTTP (both databases): the queue's pages and forms, the
list's search, bulk actions and saved searches, the side-by-side pages; each with the viewer's
security properties (session, CSRF token, same origin, escaping, another account's ids as 404)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline_tests.support.api_helpers import Api, import_traces, trace_object
from stash_pipeline_tests.support.viewer_helpers import (
    RELEASE,
    TRACES,
    World,
    csrf,
    error_of,
    login,
    scored_world,
    whole_trace_only,
)


@pytest.fixture
def world(api: Api, tmp_path: Path) -> World:
    return scored_world(api, tmp_path)


def _owner(api: Api) -> str:
    return api.store.get_trace("trace-a").owner


def test_queue_overview_explains_the_order_and_lists_the_items(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    page = client.get("/ui/review").text
    assert "reviewed <strong id=\"progress-count\">0 of 3</strong>" in page
    rows = re.findall(r'<tr data-item="trace:([^"]+)" class="reason-([a-z_]+)"', page)
    assert rows == [("trace-c", "disagreement"), ("trace-b", "disagreement"),
                    ("trace-a", "score")]
    assert "the shared release and your personal model disagree" in page
    start = client.get("/ui/review/next?agent=support")
    assert start.status_code == 303
    assert start.headers["location"] == "/ui/review/traces/trace-c?agent=support"
    assert client.get("/ui/review?outcome=won").status_code == 422
    assert "bob-trace" not in page
    # What a review becomes, before it starts (no extraction configured in the tests).
    assert 'id="yield-approve-a-comparison"><strong>approve a comparison</strong>: an approved ' \
           'comparison becomes a training pair' in page
    assert "a comment becomes training pairs only with extraction configured" in page
    assert 'id="yield-mark-done"' in page and "makes no pair" in page


def test_a_comment_keeps_the_place_and_done_moves_on(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    item = client.get("/ui/review/traces/trace-c?agent=support").text
    focus = re.search(r'<div id="review" data-kind="trace" data-focus="([^"]+)"', item).group(1)
    # The evaluators disagree most on the last action (the release's credit grows with it).
    assert focus == "m4" and 'class="action action-text focus" id="a-m4"' in item
    token = csrf(item)
    saved = client.post("/ui/review/traces/trace-c/comments?agent=support",
                        data={"csrf": token, "text": "should confirm first",
                              "action_id": "m2.call0"})
    assert saved.status_code == 303
    back = urlparse(saved.headers["location"])
    assert back.path == "/ui/review/traces/trace-c"
    assert parse_qs(back.query) == {"agent": ["support"], "focus": ["m2.call0"],
                                    "done": ["comment"]}
    page = client.get(saved.headers["location"]).text
    assert 'data-focus="m2.call0"' in page and "reviewed <strong id=\"progress-count\">1 of 3" \
        in page
    [comment] = [f for f in api.store.feedback_for(["trace-c"])]
    assert (comment.action_id, comment.author) == ("trace-c/m2.call0", "alice")
    bad = client.post("/ui/review/traces/trace-c/comments", data={"csrf": token, "text": " "})
    assert bad.status_code == 422 and "needs text" in error_of(bad.text, "review-error")
    # Done: reviewed, and on to the next item of the same queue; skip puts it last.
    done = client.post("/ui/review/traces/trace-b/done?agent=support", data={"csrf": token})
    assert done.headers["location"] == "/ui/review/next?agent=support"
    assert client.get(done.headers["location"]).headers["location"].startswith(
        "/ui/review/traces/trace-a")
    client.post("/ui/review/traces/trace-a/skip", data={"csrf": token})
    queue = client.get("/ui/review").text
    assert re.findall(r'<tr data-item="trace:([^"]+)" class="reason-([a-z_]+)"', queue) == [
        ("trace-a", "skipped")]
    client.post("/ui/review/traces/trace-a/done", data={"csrf": token})
    finished = client.get("/ui/review/next")
    assert finished.headers["location"] == "/ui/review?done=empty"
    assert "Nothing left to review" in client.get(finished.headers["location"]).text


def test_comparisons_filed_by_others_are_approved_or_rejected(api: Api, world: World) -> None:
    ana = ReviewedComparison(feedback_id("comparison", "trace-a", "trace-b", "ana"), "trace-a",
                             "trace-b", "trace-a/m2.call0", "trace-b/m2.call0",
                             status="pending", author="ana", rationale="<b>asks first</b>")
    zed = ReviewedComparison(feedback_id("comparison", "trace-c", "trace-a", "zed"), "trace-c",
                             "trace-a", status="pending", author="zed")
    api.store.add_feedback([ana], owner=_owner(api))  # the older one comes first
    api.store.add_feedback([zed], owner=_owner(api))
    client = login(api, world.alice_key)
    first = client.get("/ui/review/next").headers["location"]
    assert first == f"/ui/review/comparisons/{ana.id}"
    page = client.get(first).text
    assert "&lt;b&gt;asks first&lt;/b&gt;" in page and "<b>asks first" not in page
    assert 'id="chosen-a-m2.call0" data-action="m2.call0" tabindex="-1" open' in page
    token = csrf(page)
    approved = client.post(f"/ui/review/comparisons/{ana.id}/approve", data={"csrf": token})
    assert approved.headers["location"] == "/ui/review/next"
    stored = api.store.comparisons([ana.id])[ana.id]
    assert (stored["status"], stored["reviewer"]) == ("approved", "alice")
    # From the trace page: reject, and come back to it. Its forms carry the review version: one
    # made before another reviewer's verdict is refused (409) saying who decided what.
    trace_page = client.get("/ui/traces/trace-c").text
    assert f'/ui/review/comparisons/{zed.id}/reject' in trace_page
    assert '<input type="hidden" name="version" value="0">' in trace_page
    api.client(world.alice_key).post(f"/api/v1/comparisons/{zed.id}/review",
                                     json={"reviewer": "bo"})
    stale = client.post(f"/ui/review/comparisons/{zed.id}/reject",
                        data={"csrf": token, "next": "/ui/traces/trace-c", "version": "0"})
    assert stale.status_code == 409
    assert "changed by someone else" in stale.text and "approved by bo" in stale.text
    assert api.store.comparisons([zed.id])[zed.id]["status"] == "approved"
    rejected = client.post(f"/ui/review/comparisons/{zed.id}/reject",
                           data={"csrf": token, "next": "/ui/traces/trace-c", "version": "1"})
    assert rejected.headers["location"] == "/ui/traces/trace-c?done=rejected"
    assert api.store.comparisons([zed.id])[zed.id]["status"] == "rejected"
    assert client.post(f"/ui/review/traces/{ana.id}/approve",
                       data={"csrf": token}).status_code == 404


def test_assignment_from_the_overview(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/review").text)
    assigned = client.post("/ui/review/assign?kind=trace", data={
        "csrf": token, "items": ["trace:trace-a", "trace:trace-b"], "assignee": "bo"})
    assert assigned.headers["location"] == "/ui/review?kind=trace&done=assigned"
    mine = client.get("/ui/review?assignee=bo").text
    assert re.findall(r'data-item="trace:([^"]+)"', mine) == ["trace-b", "trace-a"]
    client.post("/ui/review/assign", data={"csrf": token, "items": ["trace:trace-b"],
                                           "unassign": "1"})
    assert re.findall(r'data-item="trace:([^"]+)"', client.get(
        "/ui/review?assignee=bo").text) == ["trace-a"]
    assert client.post("/ui/review/assign", data={"csrf": token, "items": ["trace:bob-trace"],
                                                  "assignee": "x"}).status_code == 404
    # The ticks carry each item's version: a page loaded before another change is refused.
    page = client.get("/ui/review").text
    assert 'value="trace:trace-a@1"' in page and 'value="trace:trace-c@0"' in page
    client.post("/ui/review/assign", data={"csrf": token, "items": ["trace:trace-c@0"],
                                           "assignee": "cy"})
    stale = client.post("/ui/review/assign", data={
        "csrf": token, "items": ["trace:trace-a@1", "trace:trace-c@0"], "assignee": "dee"})
    assert stale.status_code == 409 and "assigned to cy" in stale.text
    assert re.findall(r'data-item="trace:([^"]+)"', client.get(
        "/ui/review?assignee=bo").text) == ["trace-a"]  # nothing of the stale change


def test_review_forms_keep_the_viewers_security(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/review").text)
    forms = [("/ui/review/traces/trace-a/done", {"x": "1"}),
             ("/ui/review/traces/trace-a/comments", {"text": "x"}),
             ("/ui/review/assign", {"items": ["trace:trace-a"], "assignee": "x"}),
             ("/ui/traces/bulk/contribute", {"trace_ids": ["trace-a"], "contribute": "on"}),
             ("/ui/traces/bulk/comment", {"match": "all", "text": "x"}),
             ("/ui/saved-filters?tool=get_order", {"name": "n"}),
             ("/ui/traces/trace-a/contribute", {"contribute": "on"}),
             ("/ui/traces/trace-a/score", {"actions": "on"})]
    bob = login(api, world.bob_key)
    for path, body in forms:
        assert client.post(path, data=body).status_code == 403, path
        assert client.post(path, data={**body, "csrf": token},
                           headers={"Origin": "https://evil.example"}).status_code == 403, path
        assert bob.post(path, data={**body, "csrf": token}).status_code == 403, path
    assert api.store.feedback_for(list(TRACES)) == []
    assert not api.store.get_trace("trace-a").contribute
    bob_token = csrf(bob.get("/ui/traces").text)
    for path in ("/ui/review/traces/trace-a", "/ui/compare?a=trace-a&b=bob-trace",
                 "/ui/traces/trace-a/compare", "/ui/review/comparisons/nope"):
        response = bob.get(path)
        assert response.status_code == 404 and "hello" not in response.text, path
    for path, body in (("/ui/review/traces/trace-a/done", {"x": "1"}),
                       ("/ui/review/traces/trace-a/comments", {"text": "x"}),
                       ("/ui/traces/trace-a/contribute", {"contribute": "on"}),
                       ("/ui/traces/trace-a/score", {"actions": "on"})):
        assert bob.post(path, data={**body, "csrf": bob_token}).status_code == 404, path
    theirs = bob.post("/ui/traces/bulk/contribute", data={
        "csrf": bob_token, "trace_ids": ["trace-a"], "contribute": "on"})
    assert theirs.status_code == 422 and "trace-a" in error_of(theirs.text, "bulk-error")
    assert not api.store.get_trace("trace-a").contribute


def test_list_search_preview_and_escaping(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    hostile = trace_object("hostile", text="<script>alert(1)</script> refund please")
    assert alice.post("/api/v1/traces", content=json.dumps(hostile)).status_code == 200
    client = login(api, world.alice_key)
    page = client.get("/ui/traces?q=REFUND").text
    assert re.findall(r'class="trace-link" href="/ui/traces/([^"]+)"', page) == ["hostile"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt; refund please" in page
    assert "<script>alert" not in page
    assert 'value="REFUND"' in page and "1 trace(s) match this search" in page
    by_tool = client.get("/ui/traces?tool=get_order&credit_min=0.5").text
    assert re.findall(r'class="trace-link" href="/ui/traces/([^"]+)"', by_tool) == ["trace-c"]
    assert "lowest" in by_tool
    bad = client.get("/ui/traces?credit_min=2")
    assert bad.status_code == 422 and "credit_min" in bad.text


def test_bulk_actions_over_every_match(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    # "All 2 that match" on a page of one: both are acted on.
    search = "limit=25&sort=created&credit_min=0"
    on = client.post(f"/ui/traces/bulk/contribute?{search}",
                     data={"csrf": token, "match": "all", "contribute": "on"})
    assert on.status_code == 303
    assert parse_qs(urlparse(on.headers["location"]).query)["n"] == ["2"]
    assert [api.store.get_trace(t).contribute for t in TRACES] == [False, True, True]
    listed = client.get(on.headers["location"]).text
    assert "2 trace(s) now contribute" in listed
    commented = client.post(f"/ui/traces/bulk/comment?{search}",
                            data={"csrf": token, "match": "all", "text": "check the refund"})
    assert commented.status_code == 303
    assert {f.trace_id for f in api.store.feedback_for(list(TRACES))} == {"trace-b", "trace-c"}
    scored = client.post(f"/ui/traces/bulk/score?{search}",
                         data={"csrf": token, "match": "all", "model_id": world.model_id})
    assert scored.status_code == 303
    [request] = api.store.scoring_requests()
    assert set(request.traces) == {"trace-b", "trace-c"} and request.evaluator == world.model_id
    exported = client.post(f"/ui/traces/bulk/export?{search}",
                           data={"csrf": token, "match": "all", "format": "csv"})
    assert exported.status_code == 200 and "attachment" in exported.headers[
        "content-disposition"]
    assert exported.headers["content-security-policy"]
    assert [r["id"] for r in csv.DictReader(io.StringIO(exported.text))] == ["trace-b",
                                                                            "trace-c"]
    ticked = client.post("/ui/traces/bulk/export",
                         data={"csrf": token, "trace_ids": ["trace-a"], "format": "jsonl"})
    assert [json.loads(line)["id"] for line in ticked.text.splitlines()] == ["trace-a"]
    nothing = client.post("/ui/traces/bulk/comment", data={"csrf": token, "text": "x"})
    assert nothing.status_code == 422 and "tick the traces" in error_of(nothing.text,
                                                                         "bulk-error")
    # Create new reward model from every match.
    made = client.post(f"/ui/reward-models?{search}", data={"csrf": token, "match": "all",
                                                            "name": "from a search"})
    assert made.status_code == 303
    model = api.store.get_reward_model(made.headers["location"].rsplit("/", 1)[1])
    assert sorted(model.trace_ids) == ["trace-b", "trace-c"]


def test_saved_searches(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    saved = client.post("/ui/saved-filters?tool=get_order&q=Hello&sort=created",
                        data={"csrf": token, "name": "hello orders"})
    assert saved.status_code == 303
    [kept] = api.store.saved_filters(_owner(api))
    assert kept.params == {"q": "Hello", "tool": "get_order"}
    page = client.get("/ui/traces").text
    link = re.search(r'<a href="(/ui/traces\?[^"]+)" class="saved-link">hello orders</a>',
                     page).group(1)
    assert parse_qs(urlparse(link.replace("&amp;", "&")).query) == {"q": ["Hello"],
                                                                     "tool": ["get_order"]}
    refused = client.post("/ui/saved-filters?tool=get_order", data={"csrf": token, "name": ""})
    assert refused.status_code == 422 and "name" in error_of(refused.text, "save-error")
    assert login(api, world.bob_key).get("/ui/traces").text.count("saved-link") == 0
    client.post(f"/ui/saved-filters/{kept.id}/remove", data={"csrf": token})
    assert api.store.saved_filters(_owner(api)) == []


def test_side_by_side_pages(api: Api, world: World) -> None:
    assert import_traces(api.client(world.alice_key), "trace-d").status_code == 200
    client = login(api, world.alice_key)
    picker = client.get("/ui/traces/trace-a/compare?task_id=t1").text
    others = re.findall(r'<tr data-trace="([^"]+)"', picker)
    assert sorted(others) == ["trace-b", "trace-c", "trace-d"]
    assert client.get("/ui/traces/trace-a/compare?q=nothing-like-this").text.count(
        'id="pick-none"') == 1
    two = client.get("/ui/compare?a=trace-a&b=trace-c").text
    assert two.count('class="card side"') == 2 and 'id="left-a-m2.call0"' in two
    assert 'id="right-a-m2.call0"' in two and 'id="file-comparison"' in two
    assert two.count('<details class="observation">') == 4  # two system prompts, two results
    token = csrf(two)
    filed = client.post("/ui/traces/trace-a/comparisons", data={
        "csrf": token, "other": "trace-c", "better": "other", "rationale": "faster",
        "next": "/ui/compare?a=trace-a&b=trace-c"})
    assert filed.headers["location"] == "/ui/compare?a=trace-a&b=trace-c&done=compare"
    [comparison] = [f for f in api.store.feedback_for(["trace-a"])]
    assert (comparison.chosen_trace_id, comparison.status) == ("trace-c", "pending")
    evaluators = client.get("/ui/compare?a=trace-b").text
    labels = re.findall(r'<option value="([^"]+)" selected>', evaluators)
    assert labels[0] != labels[1] and world.model_id in labels
    assert 'id="file-comparison"' not in evaluators


def test_two_evaluators_show_a_whole_trace_only_model_as_that(api: Api, world: World) -> None:
    """Issue 52.3: a personal model that scored the trace as a whole only is the right side,
    with its whole-trace score and the sentence that it has no action credit, not the release
    again."""
    trace_id, model_id = whole_trace_only(api, world)
    client = login(api, world.alice_key)
    page = client.get(f"/ui/traces/{trace_id}").text
    link = re.search(r'id="compare-evaluators" href="([^"]+)"', page).group(1)
    assert parse_qs(urlparse(link.replace("&amp;", "&")).query) == {
        "a": [trace_id], "b": [trace_id], "ea": [RELEASE], "eb": [model_id]}
    assert model_id not in re.search(r'<select name="evaluator".*?</select>', page,
                                     re.S).group(0)  # the heatmap's menu: credit only
    for url in (f"/ui/compare?a={trace_id}", link.replace("&amp;", "&")):
        two = client.get(url).text
        chosen = re.findall(r'<option value="([^"]+)" selected>', two)
        assert chosen == [RELEASE, model_id], url
        assert "personal: whole traces only (whole trace only)" in two
        assert 'id="no-credit-right"' in two and 'id="no-credit-left"' not in two
        assert "it has no action credit" in two
        assert re.search(r'id="whole-score-right">Whole-trace score: raw 0.25\d*, '
                         r'calibrated 0.6', two)
        assert 'id="right-heatmap"' not in two and 'id="left-heatmap"' in two
        assert 'title="action credit of' in two.split('id="side-right"')[0]
        assert 'title="action credit of' not in two.split('id="side-right"')[1]
