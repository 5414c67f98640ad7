"""The trace viewer in a real browser: Debian's headless Chromium driven by Selenium through
chromium-driver (`.ci/run` installs both). The run saves a screenshot of each page in the
folder `STASH_SCREENSHOTS` names (default: the session's temporary directory, so a test run leaves
the checkout clean); `STASH_SCREENSHOTS=docs/screenshots` renews the set docs/viewer.md shows."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from stash_pipeline.api.ui import progress as live_pages
from stash_pipeline.core.trust import HANDFUL_NOTE
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.browser import (  # noqa: F401 - fixtures and the skip mark
    SCREENSHOTS_DIR,
    browser,
    chromium,
    log_in,
    pytestmark,
    shoot,
)
from stash_pipeline_tests.support.trust_helpers import RELEASE as TRUST_RELEASE, trust_world
from stash_pipeline_tests.support.viewer_helpers import (
    RELEASE,
    World,
    report_progress,
    running_model,
    scored_world,
    scoring_run,
    whole_trace_only,
)
from stash_pipeline_tests.support.waiting import REQUEST_S, bound


def test_list_trace_heatmap_create_model_and_download(browser, api: Api, tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    kind = request.node.callspec.params["served"]
    world: World = scored_world(api, tmp_path)
    driver = browser
    log_in(driver, api, world.alice_key)
    # The list: three traces, each with the shared release's mean credit as a badge.
    rows = driver.find_elements(By.CSS_SELECTOR, "#trace-table tbody tr")
    assert len(rows) == 3 and RELEASE in driver.page_source
    driver.find_element(By.CSS_SELECTOR, 'a.sort[data-sort="mean_action_credit"]').click()
    WebDriverWait(driver, bound(REQUEST_S)).until(ec.url_contains("sort=-mean_action_credit"))
    first = driver.find_element(By.CSS_SELECTOR, "#trace-table tbody tr a.trace-link")
    assert first.text == "trace-c"
    shoot(driver, "traces", kind)

    # A trace: the heatmap has a cell per action; clicking one opens its collapsed tool call.
    first.click()
    cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap a.cell")
    trace = api.store.get_trace("trace-c")
    assert [c.text for c in cells] == [a.local_id for a in trace.actions()]
    badges = driver.find_elements(By.CSS_SELECTOR, "#messages .badge")
    assert len(badges) == len(cells)
    tool_call = driver.find_element(By.CSS_SELECTOR, "details.tool-call")
    assert tool_call.get_attribute("open") is None
    tool_call.find_element(By.TAG_NAME, "summary").click()
    assert tool_call.get_attribute("open") is not None
    shoot(driver, "trace", kind)
    # The menu switches to the personal model's credit (ui.js submits it on change).
    from selenium.webdriver.support.ui import Select
    Select(driver.find_element(By.ID, "evaluator")).select_by_value(world.model_id)
    WebDriverWait(driver, bound(REQUEST_S)).until(ec.url_contains(f"evaluator={world.model_id}"))
    classes = {c.get_attribute("class") for c in
               driver.find_elements(By.CSS_SELECTOR, "#heatmap a.cell")}
    assert classes == {"cell credit-m3"}

    # Select traces -> Create new reward model: first without a name (the 422 inline), then right.
    driver.get(f"{api.url}/ui/traces")
    driver.find_element(By.ID, "select-all").click()
    assert all(b.is_selected() for b in driver.find_elements(By.CSS_SELECTOR, "input.pick"))
    driver.find_element(By.ID, "create-button").click()
    error = driver.find_element(By.ID, "create-error")
    assert "name" in error.text
    assert all(b.is_selected() for b in driver.find_elements(By.CSS_SELECTOR, "input.pick"))
    shoot(driver, "create-error", kind)
    driver.find_element(By.ID, "model-name").send_keys("from the browser")
    driver.find_element(By.ID, "create-button").click()
    WebDriverWait(driver, bound(REQUEST_S)).until(ec.url_contains("/ui/reward-models/"))
    assert driver.find_element(By.ID, "model-status").text == "queued"
    created = driver.current_url.rsplit("/", 1)[1]
    assert api.store.get_reward_model(created).name == "from the browser"

    # The succeeded model's page: plots, and a download link that serves the archive.
    driver.get(f"{api.url}/ui/reward-models/{world.model_id}")
    assert driver.find_element(By.CSS_SELECTOR, "#loss-curve svg polyline")
    assert driver.find_element(By.CSS_SELECTOR, "#score-histogram svg rect.plot-bar")
    shoot(driver, "model", kind)
    link = driver.find_element(By.ID, "download").get_attribute("href")
    redirect = httpx.get(link, cookies={c["name"]: c["value"] for c in driver.get_cookies()},
                         timeout=bound(REQUEST_S))
    assert redirect.status_code == 303
    archive = httpx.get(redirect.headers["location"], timeout=bound(REQUEST_S))
    assert archive.content[:2] == b"\x1f\x8b"

    driver.get(f"{api.url}/ui/releases")
    assert len(driver.find_elements(By.CSS_SELECTOR, "table.slices tbody tr")) == 3
    shoot(driver, "releases", kind)


def test_a_running_models_page_shows_its_progress_live_then_its_end(
        browser, api: Api, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The page asks for the progress (ui.js) while the model runs, without a reload, and shows
    the ended model when it ends."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    if not SCREENSHOTS_DIR:  # the docs' picture shows the page as served; else no 2 s waits
        monkeypatch.setattr(live_pages, "POLL_SECONDS", 0.25)
    world = scored_world(api, tmp_path)
    model_id = running_model(api, world, "run-browser")
    report_progress("run-browser", "STEP_START personal_checkpoint", "phase training started",
                    "step 3/9 loss 0.6931 pairs/s 2.00")
    log_in(browser, api, world.alice_key)
    browser.get(f"{api.url}/ui/reward-models/{model_id}")
    wait = WebDriverWait(browser, bound(REQUEST_S))
    progress = browser.find_element(By.ID, "progress")
    assert "training step 3/9 · loss 0.6931 · 2.00 pairs/s" in progress.text
    browser.execute_script("document.body.dataset.loadedBefore = 'yes'")  # gone on a reload
    report_progress("run-browser", "step 7/9 loss 0.4120 pairs/s 2.50")
    wait.until(lambda driver: "training step 7/9 · loss 0.4120 · 2.50 pairs/s"
               in driver.find_element(By.ID, "progress").text)
    assert browser.execute_script("return document.body.dataset.loadedBefore") == "yes"
    shoot(browser, "model-running", request.node.callspec.params["served"])
    api.store.mark_failed(model_id, "step 7/9\nWorkerStopped: stopped by signal 15 (SIGTERM)")
    wait.until(lambda driver: driver.find_elements(By.ID, "failure-reason"))
    assert browser.find_element(By.ID, "model-status").text == "failed"
    assert "WorkerStopped" in browser.find_element(By.ID, "failure-reason").text
    # Absent, asked without the implicit wait (find_elements would wait all of it).
    assert browser.execute_script("return document.getElementById('live') === null")


def test_score_again_on_a_trace_page_shows_where_the_request_stands_live(
        browser, api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Score again on a trace page: the page says what the request waits for and follows it
    (ui.js) without a reload while it waits and runs, then shows how it ended."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    monkeypatch.setattr(live_pages, "POLL_SECONDS", 0.25)
    world = scored_world(api, tmp_path)
    log_in(browser, api, world.alice_key)
    browser.get(f"{api.url}/ui/traces/trace-a")
    browser.find_element(By.ID, "score-again").click()
    # Read through the script, never a held element: the page reloads when the request ends.
    wait = WebDriverWait(browser, bound(REQUEST_S),
                         ignored_exceptions=(StaleElementReferenceException,))

    def shown(element: str) -> str:
        return browser.execute_script(
            f"const e = document.getElementById('{element}'); return e ? e.textContent : ''")

    wait.until(ec.url_contains("requests="))
    request_id = browser.current_url.split("requests=")[1].split("#")[0]
    wait.until(lambda _: shown("progress").endswith("Waiting for the pipeline to start its run."))
    # The page lands on #scores, and the wait is said there, in view (issue 52.4).
    assert browser.current_url.endswith("#scores")
    assert browser.execute_script(
        "const e = document.getElementById('progress'), r = e.getBoundingClientRect();"
        "return e.closest('#scores') !== null && r.top >= 0 && r.bottom <= window.innerHeight")
    browser.execute_script("document.body.dataset.loadedBefore = 'yes'")  # gone on a reload
    scoring_run("ahead-of-it")
    scoring_run("score-browser", request_id)
    wait.until(lambda _: shown("progress").endswith("Waiting for the worker: 1 run ahead."))
    scoring_run("score-browser", to="running")
    wait.until(lambda _: shown("live-status") == "running")
    assert browser.execute_script("return document.body.dataset.loadedBefore") == "yes"
    scoring_run("score-browser", to="failed", reason="the code server went away")
    wait.until(lambda _: shown("progress").endswith("Failed: the code server went away"))
    assert browser.execute_script("return document.body.dataset.loadedBefore") is None


def test_two_evaluators_side_by_side_show_a_whole_trace_only_model_as_that(
        browser, api: Api, tmp_path: Path) -> None:
    """Issue 52.3: from the trace page's Compare two evaluators, the right side is the personal
    model that scored the trace as a whole only: its score, no badge, and the sentence why."""
    from selenium.webdriver.common.by import By

    world = scored_world(api, tmp_path)
    trace_id, model_id = whole_trace_only(api, world)
    log_in(browser, api, world.alice_key)
    browser.get(f"{api.url}/ui/traces/{trace_id}")
    browser.find_element(By.ID, "compare-evaluators").click()
    chosen = [e.get_attribute("value") for e in
              browser.find_elements(By.CSS_SELECTOR, "#side-by-side select option:checked")]
    assert chosen == [RELEASE, model_id]
    right = browser.find_element(By.ID, "side-right")
    assert right.find_element(By.ID, "whole-score-right").text.startswith(
        "Whole-trace score: raw 0.25")
    assert "no action credit" in right.find_element(By.ID, "no-credit-right").text
    assert browser.execute_script(
        "return document.querySelectorAll('#side-right .badge:not(.credit-none)').length"
        " + ',' + document.querySelectorAll('#side-left .badge:not(.credit-none)').length"
    ).startswith("0,") and browser.find_elements(By.CSS_SELECTOR, "#left-heatmap a.cell")


def test_a_verdict_made_on_a_page_someone_else_changed_is_refused_with_the_state_now(
        browser, api: Api, tmp_path: Path) -> None:
    """Issue 51.6: the review page's verdict carries the comparison's version; when another
    reviewer decided since, the page answers 409 with who decided what, nothing is changed,
    and the same page (now at the new version) takes the verdict."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from stash_pipeline.core.feedback import ReviewedComparison, feedback_id

    world = scored_world(api, tmp_path)
    comparison = ReviewedComparison(feedback_id("comparison", "trace-a", "trace-b", "ana"),
                                    "trace-a", "trace-b", status="pending", author="ana")
    api.store.add_feedback([comparison], owner=api.store.get_trace("trace-a").owner)
    log_in(browser, api, world.alice_key)
    browser.get(f"{api.url}/ui/review/comparisons/{comparison.id}")
    assert browser.find_element(By.CSS_SELECTOR, "#review-approve input[name=version]"
                                ).get_attribute("value") == "0"
    # Behind the page's back another reviewer approves it.
    with api.client(world.alice_key) as other:
        assert other.post(f"/api/v1/comparisons/{comparison.id}/review",
                          json={"reviewer": "bo", "version": 0}).status_code == 200
    browser.find_element(By.ID, "review-reject-button").click()
    error = browser.find_element(By.ID, "review-error").text
    assert "changed by someone else" in error and "approved by bo" in error, error
    stored = api.store.comparisons([comparison.id])[comparison.id]
    assert (stored["status"], stored["reviewer"]) == ("approved", "bo")
    assert browser.find_element(By.CSS_SELECTOR, "#review-reject input[name=version]"
                                ).get_attribute("value") == "1"
    browser.execute_script("window.__conflictPage = true")
    browser.find_element(By.ID, "review-reject-button").click()  # now at version 1: taken
    WebDriverWait(browser, bound(REQUEST_S)).until(lambda _: browser.execute_script(
        "return window.__conflictPage === undefined && document.readyState === 'complete'"))
    assert browser.execute_script("return document.getElementById('review-error')") is None
    stored = api.store.comparisons([comparison.id])[comparison.id]
    assert (stored["status"], stored["reviewer"]) == ("rejected", "alice")


def test_the_trust_reports_charts_render_from_the_model_page_and_the_releases_page(
        browser, api: Api, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """From the model page to its trust report: the seed's sentence instead of a bare 1.0, every
    chart drawn with a dot and an interval per row (and a tooltip with the numbers), the
    reliability curve with the sentence that the calibrated score is no probability; then the
    release's report from the releases page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    kind = request.node.callspec.params["served"]
    world = trust_world(api, tmp_path)
    log_in(browser, api, world.key)
    browser.get(f"{api.url}/ui/reward-models/{world.model_id}")
    assert browser.find_element(By.ID, "eval-handful").text.endswith(HANDFUL_NOTE)
    assert "on 3 held-out pairs (95% interval 0.44" in \
        browser.find_element(By.ID, "eval-accuracy").text
    shoot(browser, "model-handful", kind)
    browser.find_element(By.ID, "trust-link").click()
    WebDriverWait(browser, bound(REQUEST_S)).until(ec.url_contains("/trust"))
    assert browser.find_element(By.ID, "trust-title").text == "How far to trust refunds"
    assert browser.find_element(By.ID, "held-out-handful").text == HANDFUL_NOTE
    for metric, rows in (("heldout_accuracy", 3), ("outcome_auc_trace_score", None),
                         ("outcome_auc_mean_action_credit", None),
                         ("spearman_trace_rating", None)):
        chart = browser.find_element(By.CSS_SELECTOR, f"#chart-{metric} svg")
        assert chart.is_displayed() and chart.size["width"] > 400 and chart.size["height"] > 80
        drawn = chart.find_elements(By.CSS_SELECTOR, "g.plot-interval")
        assert drawn and (rows is None or len(drawn) == rows), metric
        dot = drawn[0].find_element(By.TAG_NAME, "circle")
        assert dot.is_displayed() and dot.size["width"] > 0
        tip = drawn[0].find_element(By.TAG_NAME, "title").get_attribute("textContent")
        assert tip.startswith("all: ") and "(95% " in tip and ", n " in tip
    curve = browser.find_element(By.CSS_SELECTOR, "#chart-success_rate_by_calibrated_score svg")
    assert curve.is_displayed() and curve.find_elements(By.CSS_SELECTOR, "g.plot-bin")
    assert browser.find_element(By.ID, "not-a-probability").text.startswith(
        "The calibrated score is not a probability of correctness")
    assert browser.find_element(By.CSS_SELECTOR, "#figures-outcome_auc_trace_score tbody tr")
    shoot(browser, "trust-model", kind)

    browser.get(f"{api.url}/ui/releases")
    browser.find_element(By.CSS_SELECTOR, "a.trust-link").click()
    WebDriverWait(browser, bound(REQUEST_S)).until(ec.url_contains("/trust"))
    assert browser.find_element(By.ID, "trust-title").text == \
        f"How far to trust release {TRUST_RELEASE}"
    for metric in ("outcome_auc_mean_action_credit", "spearman_trace_rating_mean_credit"):
        chart = browser.find_element(By.CSS_SELECTOR, f"#chart-{metric} svg")
        assert chart.is_displayed() and chart.find_elements(By.CSS_SELECTOR, "g.plot-interval")
    # 40 benchmark pairs: no handful sentence (asked without the implicit wait).
    assert browser.execute_script("return document.getElementById('held-out-handful') === null")
    shoot(browser, "trust-release", kind)


def test_another_accounts_trace_and_model_are_404_pages(browser, api: Api, tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    from selenium.webdriver.common.by import By

    world = scored_world(api, tmp_path)
    log_in(browser, api, world.bob_key)
    for path in ("/ui/traces/trace-a", f"/ui/reward-models/{world.model_id}"):
        browser.get(api.url + path)
        assert browser.find_element(By.CSS_SELECTOR, "h1.error-code").text == "404"
        assert "trace-b" not in browser.page_source
    shoot(browser, "not-found", request.node.callspec.params["served"])


def test_api_docs_render_without_the_internet(browser, api: Api,
                                              request: pytest.FixtureRequest) -> None:
    """Swagger UI's assets come from the app (the fastapi-offline package), not from a CDN:
    this machine has no internet, so the page renders only if that is so."""
    from selenium.webdriver.common.by import By

    if request.node.callspec.params["served"] != "sqlite":
        pytest.skip("the docs page does not touch the store")
    browser.get(f"{api.url}/docs")
    title = browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title")
    assert "stash-pipeline API" in title.text
    assert browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
    scripts = [s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")]
    assert all(src.startswith(api.url) for src in scripts if src)
    shoot(browser, "api-docs", "sqlite")
