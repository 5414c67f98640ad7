"""The review loop in a real browser (Debian's headless Chromium through chromium-driver), on 70
real tau2-bench airline traces: the queue's keyboard flow end to end, comments, bulk actions over
every trace that matches a search, saved searches and the side-by-side pages. Screenshots as
test_viewer_browser.py takes them (``STASH_SCREENSHOTS``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from stash_pipeline.core.feedback import Comment, ReviewedComparison
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.browser import browser, chromium, log_in, pytestmark, shoot  # noqa: F401
from stash_pipeline_tests.support.viewer_helpers import AirlineWorld, airline_world
from stash_pipeline_tests.support.waiting import REQUEST_S, bound


@pytest.fixture
def world(api: Api, tmp_path: Path) -> AirlineWorld:
    return airline_world(api, tmp_path)


def _kind(request: pytest.FixtureRequest) -> str:
    return request.node.callspec.params["served"]


def _path(driver) -> tuple[str, dict[str, list[str]]]:
    url = urlparse(driver.current_url)
    return url.path, parse_qs(url.query)


def _press(driver, keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(keys).perform()


def _go(driver, by: str, value: str) -> None:
    """Click what leads to another page and wait until the page before it has gone and the new
    one has loaded: a click can return while a form's submission is still on its way, and the
    next lookup would then find the old page's element. The old page is told by a mark in its
    window, not by an element: asking Chromium about an element of a document being replaced
    can fail ("Node with given id does not belong to the document")."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("window.__pageBeforeGo = true")
    driver.find_element(by, value).click()

    def replaced(driver) -> bool:
        try:
            return driver.execute_script("return window.__pageBeforeGo === undefined"
                                         " && document.readyState === 'complete'")
        except WebDriverException:  # asked while the documents change: ask again
            return False

    WebDriverWait(driver, bound(REQUEST_S), ignored_exceptions=()).until(replaced)


def _choose(driver, element_id: str, value: str) -> None:
    """Choose an option once the page has settled: right after a navigation Chromium can answer
    a lookup with the node of the document being replaced ("Node with given id does not belong
    to the document"), so the lookup and the choice are tried again on the settled page."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def chosen(driver) -> bool:
        if driver.execute_script("return document.readyState") != "complete":
            return False
        try:
            Select(driver.find_element(By.ID, element_id)).select_by_value(value)
        except (StaleElementReferenceException, WebDriverException):
            return False
        return True

    WebDriverWait(driver, bound(REQUEST_S), ignored_exceptions=()).until(chosen)


def test_the_queues_keyboard_flow_end_to_end(browser, api: Api, world: AirlineWorld,
                                             request: pytest.FixtureRequest) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    alice = api.client(world.alice_key)
    wait = WebDriverWait(driver, bound(REQUEST_S))
    log_in(driver, api, world.alice_key)
    driver.get(f"{api.url}/ui/review")
    queue = alice.get("/api/v1/review/queue", params={"limit": 200}).json()
    rows = driver.find_elements(By.CSS_SELECTOR, "#queue-table tbody tr[data-item]")
    assert [r.get_attribute("data-item") for r in rows] == [
        f"{i['kind']}:{i['id']}" for i in queue["items"][:50]]
    assert driver.find_element(By.ID, "progress-count").text == \
        f"{queue['reviewed']} of {queue['total']}"
    shoot(driver, "review-queue", _kind(request))

    # The first item is ana's comparison: ? shows the keys, a approves it and moves on.
    _go(driver, By.ID, "start-review")
    assert _path(driver)[0] == f"/ui/review/comparisons/{world.comparison_id}"
    _press(driver, "?")
    assert driver.find_element(By.ID, "help").is_displayed()
    shoot(driver, "review-comparison", _kind(request))
    _press(driver, "?")
    wait.until(lambda d: not d.find_element(By.ID, "help").is_displayed())
    _press(driver, "a")
    expected = queue["items"][1]
    wait.until(lambda d: _path(d)[0] == f"/ui/review/traces/{expected['id']}")
    approved = api.store.comparisons([world.comparison_id])[world.comparison_id]
    assert (approved["status"], approved["reviewer"]) == ("approved", "alice")

    # A trace: the focus starts where the queue says; j and k move it (a tool call opens).
    review = driver.find_element(By.ID, "review")
    focus = alice.get("/api/v1/review/next").json()["item"]["focus_action"].rsplit("/", 1)[1]
    assert review.get_attribute("data-focus") == focus
    actions = [a.get_attribute("data-action") for a in
               driver.find_elements(By.CSS_SELECTOR, "#messages .action[data-action]")]
    start = actions.index(focus)
    _press(driver, "k" if start else "j")
    moved = actions[start - 1] if start else actions[1]
    element = driver.find_element(By.CSS_SELECTOR, f'#messages [data-action="{moved}"]')
    assert "focus" in element.get_attribute("class")
    if element.tag_name == "details":
        assert element.get_attribute("open") is not None
    assert _path(driver)[1]["focus"] == [moved]
    # c opens the comment box on that action; Ctrl+Enter saves; the place is kept.
    _press(driver, "c")
    box = driver.find_element(By.ID, "review-comment-text")
    assert box.is_displayed() and driver.switch_to.active_element == box
    assert driver.find_element(By.ID, "review-comment-target").get_attribute("value") == moved
    box.send_keys("Should have asked for the booking code before searching.")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    wait.until(lambda d: d.find_elements(By.ID, "done"))
    path, params = _path(driver)
    assert path == f"/ui/review/traces/{expected['id']}" and params["focus"] == [moved]
    assert driver.find_element(By.ID, "review").get_attribute("data-focus") == moved
    comment = next(f for f in api.store.feedback_for([expected["id"]]) if isinstance(f, Comment))
    assert comment.action_id == f"{expected['id']}/{moved}" and comment.author == "alice"
    progress = alice.get("/api/v1/review/next").json()
    assert driver.find_element(By.ID, "progress-count").text == \
        f"{progress['reviewed']} of {progress['total']}"
    driver.execute_script("window.scrollTo(0, 0)")
    shoot(driver, "review-item", _kind(request))

    # n: on to the next item; x skips it (to the end); n marks the next one done.
    _press(driver, "n")
    second = progress["item"]["id"]
    wait.until(lambda d: _path(d)[0] == f"/ui/review/traces/{second}")
    _press(driver, "x")
    wait.until(lambda d: _path(d)[0] != f"/ui/review/traces/{second}")
    third = alice.get("/api/v1/review/next").json()["item"]["id"]
    assert _path(driver)[0] == f"/ui/review/traces/{third}"
    _press(driver, "n")
    wait.until(lambda d: _path(d)[0] != f"/ui/review/traces/{third}")
    after = alice.get("/api/v1/review/queue", params={"limit": 200}).json()
    assert after["items"][-1]["id"] == second and after["items"][-1]["status"] == "skipped"
    assert third not in {i["id"] for i in after["items"]}
    # Typing in a field is the field's: "x" in the comment box skips nothing.
    _press(driver, "c")
    driver.find_element(By.ID, "review-comment-text").send_keys("x")
    assert alice.get("/api/v1/review/next").json()["item"]["id"] == after["items"][0]["id"]


def test_bulk_actions_over_all_that_match_and_saved_searches(
        browser, api: Api, world: AirlineWorld, request: pytest.FixtureRequest) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    alice = api.client(world.alice_key)
    matching = alice.get("/api/v1/traces", params={"outcome": "failed", "limit": 500}).json()
    assert matching["total"] > 25  # more than the page shows
    log_in(driver, api, world.alice_key)
    driver.get(f"{api.url}/ui/traces?limit=25")
    _choose(driver, "filter-outcome", "failed")
    _go(driver, By.ID, "search")
    assert f"{matching['total']} trace(s) match this search" in driver.find_element(
        By.ID, "list-summary").text
    assert len(driver.find_elements(By.CSS_SELECTOR, "#trace-table tbody tr")) == 25
    previews = [p.text for p in driver.find_elements(By.CSS_SELECTOR, "td.preview")]
    assert all(previews)  # the first user message of each
    driver.find_element(By.ID, "select-matching").click()
    assert all(b.is_selected() for b in driver.find_elements(By.CSS_SELECTOR, "input.pick"))
    _go(driver, By.ID, "bulk-contribute-on")
    assert f"{matching['total']} trace(s) now contribute" in driver.find_element(By.ID,
                                                                                "done").text
    contributing = {t.id for t in api.store.list_traces() if t.contribute}
    assert contributing == {t["id"] for t in matching["traces"]}
    # A bulk comment over every match, then the search saved under a name.
    driver.find_element(By.ID, "select-matching").click()
    driver.find_element(By.ID, "bulk-comment-text").send_keys("Check the policy on refunds.")
    _go(driver, By.ID, "bulk-comment")
    assert "Saved: your comment on" in driver.find_element(By.ID, "done").text
    commented = {f.trace_id for f in api.store.feedback_for(world.trace_ids)
                 if isinstance(f, Comment)}
    assert commented == contributing
    driver.find_element(By.ID, "search-text").send_keys("cancel")
    _go(driver, By.ID, "search")
    found = alice.get("/api/v1/traces", params={"outcome": "failed", "q": "cancel"}).json()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#trace-table tbody tr[data-trace]")) == \
        min(found["total"], 25)
    driver.find_element(By.ID, "save-filter-name").send_keys("failed cancellations")
    _go(driver, By.ID, "save-filter-button")
    link = driver.find_element(By.CSS_SELECTOR, "#saved-filters a.saved-link")
    assert link.text == "failed cancellations"
    shoot(driver, "traces-search", _kind(request))
    driver.get(f"{api.url}/ui/traces")
    _go(driver, By.CSS_SELECTOR, "#saved-filters a.saved-link")
    assert parse_qs(urlparse(driver.current_url).query) == {"outcome": ["failed"],
                                                            "q": ["cancel"]}


def test_compare_from_a_searchable_list_side_by_side(browser, api: Api, world: AirlineWorld,
                                                     request: pytest.FixtureRequest) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    by_task: dict[str, list[str]] = {}
    for trace in api.store.get_traces(world.trace_ids):
        by_task.setdefault(trace.task_id, []).append(trace.id)
    first, other = next(ids for ids in by_task.values() if len(ids) == 2)  # two agents' runs
    log_in(driver, api, world.alice_key)
    driver.get(f"{api.url}/ui/traces/{first}")
    # Collapsed by default: the system prompt (the airline policy) and every tool result.
    observations = driver.find_elements(By.CSS_SELECTOR, "#messages details.observation")
    assert observations and all(d.get_attribute("open") is None for d in observations)
    assert not driver.find_element(By.CSS_SELECTOR, "details.observation .content").is_displayed()
    # No rating control (asked without the implicit wait, which find_elements would spend).
    assert driver.execute_script("return document.querySelector('[name=value], #rate-form')"
                                 " === null")
    _go(driver, By.ID, "compare-find")
    # Traces of the same task by default: the other agent's run of it.
    rows = driver.find_elements(By.CSS_SELECTOR, "#pick-table tbody tr[data-trace]")
    assert [r.get_attribute("data-trace") for r in rows] == [other]
    shoot(driver, "compare-pick", _kind(request))
    _go(driver, By.CSS_SELECTOR, f'tr[data-trace="{other}"] a.pick-other')
    assert _path(driver) == ("/ui/compare", {"a": [first], "b": [other]})
    sides = driver.find_elements(By.CSS_SELECTOR, "#side-by-side section.side")
    assert [s.find_element(By.CSS_SELECTOR, "a.side-trace").text for s in sides] == [first,
                                                                                   other]
    assert all(s.find_elements(By.CSS_SELECTOR, ".heatmap a.cell") for s in sides)
    driver.find_element(By.ID, "right-better").click()
    driver.find_element(By.ID, "comparison-rationale").send_keys("it asked for the user id")
    shoot(driver, "compare", _kind(request))
    _go(driver, By.ID, "file-comparison-button")
    assert "pending until a reviewer other than you" in driver.find_element(By.ID, "done").text
    comparison = next(f for f in api.store.feedback_for([first])
                      if isinstance(f, ReviewedComparison) and f.author == "alice")
    assert (comparison.chosen_trace_id, comparison.rejected_trace_id) == (other, first)
    # One trace under two evaluators.
    driver.get(f"{api.url}/ui/traces/{first}")
    _go(driver, By.ID, "compare-evaluators")
    chosen = [e.get_attribute("value") for e in
              driver.find_elements(By.CSS_SELECTOR, "#side-by-side select option:checked")]
    assert len(chosen) == 2 and chosen[0] != chosen[1]
    shoot(driver, "compare-evaluators", _kind(request))
