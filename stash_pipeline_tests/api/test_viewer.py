"""The trace viewer over real HTTP (both databases): login, CSRF, the pages' facts, isolation."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from stash_pipeline.core.trust import HANDFUL_NOTE
from stash_pipeline.services import accounts
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.trust_helpers import RELEASE as TRUST_RELEASE, trust_world
from stash_pipeline_tests.support.viewer_helpers import (
    RELEASE,
    TRACES,
    World,
    csrf,
    error_of,
    login,
    report_progress,
    running_model,
    scored_world,
    scoring_run,
)
from stash_pipeline_tests.support.waiting import REQUEST_S, bound


@pytest.fixture
def world(api: Api, tmp_path: Path) -> World:
    return scored_world(api, tmp_path)


def test_login_sets_a_strict_httponly_cookie_and_pages_need_it(api: Api, world: World) -> None:
    anonymous = api.client()
    response = anonymous.get("/ui/traces?sort=-outcome")
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/login?next=%2Fui%2Ftraces%3Fsort%3D-outcome"
    refused = anonymous.post("/ui/login", data={"api_key": "stash_wrong"})
    assert refused.status_code == 401 and "not a valid API key" in refused.text
    response = anonymous.post("/ui/login", data={"api_key": world.alice_key,
                                                 "next": "https://evil.example/"})
    assert response.headers["location"] == "/ui/traces"  # never another site
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and world.alice_key not in cookie
    page = login(api, world.alice_key).get("/ui/traces")
    assert page.status_code == 200 and "alice" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_the_apis_root_leads_a_browser_to_the_viewer(api: Api) -> None:
    anonymous = api.client()
    response = anonymous.get("/")
    assert response.status_code == 303 and response.headers["location"] == "/ui/traces"
    response = anonymous.get("/", follow_redirects=True)
    assert response.url.path == "/ui/login" and "API key" in response.text


def test_a_new_key_ends_the_old_sessions(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    alice = next(a for a in api.store.list_accounts() if a.name == "alice")
    accounts.issue_key(api.store, alice.id)
    assert client.get("/ui/traces").status_code == 303


def test_forms_need_the_session_token_and_this_origin(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    body = {"name": "m", "trace_ids": [TRACES[0], TRACES[1]]}
    assert client.post("/ui/reward-models", data=body).status_code == 403
    assert client.post("/ui/reward-models", data={**body, "csrf": "0" * 64}).status_code == 403
    foreign = client.post("/ui/reward-models", data={**body, "csrf": token},
                          headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    # The token belongs to the session: another account's session cannot use it.
    bob = login(api, world.bob_key)
    assert bob.post("/ui/reward-models", data={**body, "csrf": token}).status_code == 403
    assert len(api.store.list_reward_models()) == 1  # only the world's model


def test_trace_list_shows_credit_and_sorts_and_filters(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    page = client.get("/ui/traces").text
    assert RELEASE in page and page.count('class="trace-link"') == 3
    assert "bob-trace" not in page
    by_credit = client.get("/ui/traces?sort=-mean_action_credit").text
    order = re.findall(r'class="trace-link" href="/ui/traces/([^"]+)"', by_credit)
    assert order == ["trace-c", "trace-b", "trace-a"]  # the world's credit grows with n
    ascending = client.get("/ui/traces?sort=mean_action_credit").text
    assert re.findall(r'class="trace-link" href="/ui/traces/([^"]+)"', ascending) == order[::-1]
    assert client.get("/ui/traces?state=pending").text.count('class="trace-link"') == 0
    assert client.get("/ui/traces?state=scored").text.count('class="trace-link"') == 3
    assert client.get("/ui/traces?agent=nobody").text.count('class="trace-link"') == 0
    paged = client.get("/ui/traces?limit=25&sort=created&offset=2").text
    assert paged.count('class="trace-link"') == 1 and 'id="prev"' in paged
    bad = client.get("/ui/traces?sort=nonsense")
    assert bad.status_code == 422 and "sort is one of" in bad.text


def test_create_new_reward_model_shows_the_requests_422_inline(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    nothing = client.post("/ui/reward-models", data={"csrf": token, "name": "m"})
    assert nothing.status_code == 422
    assert "trace_ids" in error_of(nothing.text, "create-error")
    bad = client.post("/ui/reward-models", data={"csrf": token, "name": "m", "epochs": "many",
                                                 "trace_ids": [TRACES[0]]})
    assert bad.status_code == 422 and "epochs" in error_of(bad.text, "create-error")
    assert 'value="trace-a" class="pick" checked' in bad.text
    theirs = client.post("/ui/reward-models", data={"csrf": token, "name": "m",
                                                    "trace_ids": [world.bob_trace]})
    assert theirs.status_code == 422
    made = client.post("/ui/reward-models", data={"csrf": token, "name": "second",
                                                  "trace_ids": list(TRACES), "epochs": "2"})
    assert made.status_code == 303
    model_id = made.headers["location"].rsplit("/", 1)[1]
    model = api.store.get_reward_model(model_id)
    assert model.name == "second" and model.epochs == 2 and set(model.trace_ids) == set(TRACES)
    page = client.get(made.headers["location"]).text
    assert "queued" in page and f'data-poll-url="/ui/reward-models/{model_id}/progress"' in page


def test_trace_page_has_a_heatmap_per_evaluator_and_feedback_forms(api: Api,
                                                                   world: World) -> None:
    client = login(api, world.alice_key)
    trace = api.store.get_trace("trace-b")
    page = client.get("/ui/traces/trace-b").text
    cells = re.findall(r'class="cell (credit-[a-z0-9]+)" href="#a-([^"]+)"', page)
    assert [local for _, local in cells] == [a.local_id for a in trace.actions()]
    assert f"shared evaluator {RELEASE}" in page and "personal: first personal model" in page
    # Tool calls, tool results and the system prompt are collapsed.
    calls = re.findall(r'<details class="tool-call action"[^>]*>', page)
    assert len(calls) == 1 and " open" not in calls[0]
    observations = [m for m in trace.messages if m.role in ("system", "tool")]
    assert page.count('<details class="observation">') == len(observations) == 2
    personal = client.get(f"/ui/traces/trace-b?evaluator={world.model_id}").text
    assert set(re.findall(r'class="cell (credit-[a-z0-9]+)" href', personal)) == {"credit-m3"}
    # The seed: "There is no separate Auto mode or rating control in the UI".
    assert 'id="rate-form"' not in page and "/ratings" not in page
    token = csrf(page)
    assert client.post("/ui/traces/trace-b/ratings", data={
        "csrf": token, "value": "1.5", "action_id": "m2"}).status_code == 404
    missing = client.post("/ui/traces/trace-b/comments",
                          data={"csrf": token, "text": "hm", "action_id": "m99"})
    assert missing.status_code == 422 and "m99" in error_of(missing.text, "feedback-error")
    assert client.post("/ui/traces/trace-b/comparisons", data={
        "csrf": token, "other": "trace-a", "better": "other"}).status_code == 303
    kinds = sorted(type(f).__name__ for f in api.store.feedback_for(["trace-b"]))
    assert kinds == ["ReviewedComparison"]
    assert client.post("/ui/traces/trace-b/comparisons", data={
        "csrf": token, "other": world.bob_trace}).status_code == 422


def test_model_page_plots_and_download(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    page = client.get(f"/ui/reward-models/{world.model_id}").text
    assert '<svg class="plot"' in page and "<polyline" in page and 'class="plot-bar"' in page
    assert "Held-out evaluation is unavailable" in page
    assert 'id="phases"' in page and "loss_curve" not in page
    assert 'id="score-again-queued"' not in page  # no Score again under way
    download = client.get(f"/ui/reward-models/{world.model_id}/weights")
    assert download.status_code == 303
    archive = httpx.get(download.headers["location"], timeout=bound(REQUEST_S))
    assert archive.status_code == 200 and archive.content[:2] == b"\x1f\x8b"


def test_model_page_says_what_a_score_again_still_has_queued(api: Api, world: World) -> None:
    """Issue 54: a Score again of the owner's every trace works in bounded chunks; the model's
    page says how many of the owner's traces are still queued for it."""
    api.store.request_score_again(world.model_id)
    queued = api.store.queue_score_again(world.model_id)
    assert queued > 0
    page = login(api, world.alice_key).get(f"/ui/reward-models/{world.model_id}").text
    assert (f'id="score-again-queued">Score again: {queued} of your traces still queued for '
            "this model") in page


def test_releases_page_shows_the_gate_per_slice(api: Api, world: World) -> None:
    page = login(api, world.alice_key).get("/ui/releases").text
    assert RELEASE in page and "released" in page
    assert page.count("<tr class=\"decision-") == 3  # tool, domain and agent slices


def test_another_accounts_trace_or_model_is_a_404_page(api: Api, world: World) -> None:
    bob = login(api, world.bob_key)
    for path in ("/ui/traces/trace-a", f"/ui/reward-models/{world.model_id}",
                 f"/ui/reward-models/{world.model_id}/weights", "/ui/traces/no-such-trace"):
        response = bob.get(path)
        assert response.status_code == 404 and response.headers["content-type"].startswith(
            "text/html"), path
        assert "trace-a" not in response.text.replace("/ui/traces/trace-a", "")
    token = csrf(bob.get("/ui/traces").text)
    assert bob.post(f"/ui/reward-models/{world.model_id}/score",
                    data={"csrf": token}).status_code == 404
    assert bob.post("/ui/traces/trace-a/comments",
                    data={"csrf": token, "text": "x"}).status_code == 404
    # The JSON API keeps its JSON errors.
    api_404 = api.client(world.bob_key).get("/api/v1/traces/trace-a")
    assert api_404.status_code == 404 and api_404.json()["detail"]


def test_a_running_models_progress_is_json_for_its_owner_only(api: Api, world: World) -> None:
    """The page's live progress: the worker's phase, training step, loss and pairs/s from the
    run's log, as the page's JSON route, under the page's rules (401 signed out, 404 not yours)."""
    model_id = running_model(api, world, "run-live")
    report_progress("run-live", "STEP_START personal_checkpoint", "phase training started",
                    "step 3/9 loss 0.6931 pairs/s 2.00", "a line that is no progress")
    client = login(api, world.alice_key)
    route = f"/ui/reward-models/{model_id}/progress"
    response = client.get(route)
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    text = ("Dagster step personal_checkpoint · phase training · training step 3/9 · "
            "loss 0.6931 · 2.00 pairs/s")
    assert response.json() == {
        "id": model_id, "status": "running", "attempt": 1, "live": True, "text": text,
        "wait": None,
        "progress": {"dagster_step": "personal_checkpoint", "phase": "training", "step": 3,
                     "total": 9, "loss": 0.6931, "pairs_per_second": 2.0,
                     "line": "step 3/9 loss 0.6931 pairs/s 2.00"}}
    page = client.get(f"/ui/reward-models/{model_id}").text
    assert f'data-poll-url="{route}"' in page and error_of(page, "progress") == text
    # Scoring after training: its counts and time left, the last training step kept.
    report_progress("run-live", "phase scoring started",
                    "scoring: 40/200 traces, 500/2544 actions, 50.0 actions/s, about 41 s left")
    state = client.get(route).json()
    assert (state["progress"]["phase"], state["progress"]["step"]) == ("scoring", 3)
    assert state["text"].endswith("· scoring: 40/200 traces, 500/2544 actions, 50.0 actions/s, "
                                  "about 41 s left")
    # Another account's model is not found, like a missing one; no session is a 401.
    for who, path, status in ((login(api, world.bob_key), route, 404),
                              (client, "/ui/reward-models/no-such-model/progress", 404),
                              (api.client(), route, 401)):
        refused = who.get(path)
        assert refused.status_code == status and refused.json()["detail"], path
    assert login(api, world.bob_key).get(route).json() == {
        "detail": f"no reward model {model_id}"}  # the words of a missing one, nothing of it
    # A queued model waits for its run; an ended one is no longer live.
    api.store.mark_failed(model_id, "worker killed (signal 9)")
    ended = client.get(route).json()
    assert (ended["status"], ended["live"], ended["progress"]) == ("failed", False, None)
    assert 'id="live"' not in client.get(f"/ui/reward-models/{model_id}").text
    queued = client.get(f"/ui/reward-models/{world.model_id}/progress").json()
    assert queued["live"] is False and queued["status"] == "succeeded"


def test_trust_pages_show_the_report_with_its_charts_and_the_seeds_sentences(
        api: Api, tmp_path: Path) -> None:
    world = trust_world(api, tmp_path)
    client = login(api, world.key)
    model = client.get(f"/ui/reward-models/{world.model_id}").text
    assert error_of(model, "eval-accuracy").startswith(
        "1.0000 on 3 held-out pairs (95% interval 0.44")
    assert HANDFUL_NOTE in model and f'href="/ui/reward-models/{world.model_id}/trust"' in model
    assert "(a handful: too noisy to establish quality)" in client.get("/ui/reward-models").text
    page = client.get(f"/ui/reward-models/{world.model_id}/trust")
    assert page.status_code == 200
    assert error_of(page.text, "held-out-handful") == HANDFUL_NOTE
    assert error_of(page.text, "not-a-probability").startswith(
        "The calibrated score is not a probability of correctness")
    for metric in ("heldout_accuracy", "outcome_auc_trace_score",
                   "outcome_auc_mean_action_credit", "spearman_trace_rating",
                   "success_rate_by_calibrated_score"):
        assert f'id="chart-{metric}"><svg class="plot"' in page.text, metric
    assert 'id="figures-truncated_traces"' in page.text
    # The verdict, on the report's page and the model's: five tasks draw none.
    assert error_of(page.text, "trust-verdict").startswith("Verdict: too few tasks (5) to judge")
    assert 'id="figures-baseline_length_auc"' in page.text
    assert error_of(model, "trust-verdict").startswith(
        "Verdict: the AUC of its whole-trace score against verified outcomes is")
    release = client.get("/ui/releases/current/trust").text
    assert f"How far to trust release {TRUST_RELEASE}" in release
    assert f'href="/ui/releases/{TRUST_RELEASE}/trust"' in client.get("/ui/releases").text
    # Another account's model, and a release that does not exist, are 404 pages.
    _, other = accounts.create(api.store, "mallory")
    mallory = login(api, other)
    assert mallory.get(f"/ui/reward-models/{world.model_id}/trust").status_code == 404
    assert mallory.get("/ui/releases/nope/trust").status_code == 404
    assert api.client().get("/ui/releases/current/trust").status_code == 303  # log in first


def test_score_again_from_a_trace_page_and_the_list_shows_where_the_request_stands(
        api: Api, world: World) -> None:
    """After Score again, the trace page (and the list, after the bulk action) follows the
    request as a model's page follows the model: waiting for its run, then for the worker with
    the runs ahead, running, then failed with the reason; the page's JSON route under the page's
    rules (401 signed out, 404 not yours)."""
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces/trace-a").text)
    response = client.post("/ui/traces/trace-a/score", data={"csrf": token})
    assert response.status_code == 303
    [request] = [r for r in api.store.scoring_requests() if list(r.traces) == ["trace-a"]]
    assert response.headers["location"] == f"/ui/traces/trace-a?requests={request.id}#scores"
    route = f"/ui/score-requests/progress?requests={request.id}"
    page = client.get(f"/ui/traces/trace-a?requests={request.id}").text
    assert f'data-poll-url="{route}"' in page
    assert error_of(page, "progress") == (f"Score again request {request.id}: Waiting for the "
                                          "pipeline to start its run.")
    scoring_run("earlier-request")  # made first: ahead of this request's run
    scoring_run("score-run", request.id)
    state = client.get(route)
    assert state.status_code == 200 and state.headers["cache-control"] == "no-store"
    assert state.json() == {
        "status": "queued", "live": True,
        "text": f"Score again request {request.id}: Waiting for the worker: 1 run ahead.",
        "requests": [{"request_id": request.id, "status": "queued",
                      "text": "Waiting for the worker: 1 run ahead."}]}
    scoring_run("score-run", to="running")
    assert client.get(route).json()["text"].endswith("Running: the worker is scoring it.")
    # Another account's request is not found, like a missing one; no session is a 401.
    bob = login(api, world.bob_key)
    for who, path, status in ((bob, route, 404), (client, "/ui/score-requests/progress"
                                                  "?requests=999999", 404),
                              (client, "/ui/score-requests/progress?requests=x", 404),
                              (api.client(), route, 401)):
        refused = who.get(path)
        assert refused.status_code == status and refused.json()["detail"], path
    assert bob.get(f"/ui/traces/{world.bob_trace}?requests={request.id}").status_code == 404
    scoring_run("score-run", to="failed", reason="the code server went away")
    ended = client.get(route).json()
    assert (ended["status"], ended["live"]) == ("failed", False)
    page = client.get(f"/ui/traces/trace-a?requests={request.id}").text
    assert "data-poll-url" not in page  # ended: nothing to follow
    assert error_of(page, "progress") == (f"Score again request {request.id}: Failed: the code "
                                          "server went away")

    # The list's bulk Score again follows its requests the same way.
    response = client.post("/ui/traces/bulk/score?sort=-created",
                           data={"csrf": token, "trace_ids": ["trace-b", "trace-c"]})
    [bulk] = [r for r in api.store.scoring_requests() if sorted(r.traces) == ["trace-b", "trace-c"]]
    assert f"requests={bulk.id}" in response.headers["location"]
    listed = client.get(response.headers["location"]).text
    assert error_of(listed, "done") == "Score again was requested for 2 trace(s)."
    assert error_of(listed, "progress") == (f"Score again request {bulk.id}: Waiting for the "
                                            "pipeline to start its run.")
    assert f'data-poll-url="/ui/score-requests/progress?requests={bulk.id}"' in listed
