"""The viewer under hostile header, cookie and form values, and Log out that ends the session on the
server (both databases). A bad session or token is a redirect to login, a 401 or a 403, never a
500; a cookie saved before Log out is no session when replayed."""

from __future__ import annotations

import base64

import httpx
import pytest

from stash_pipeline_tests.support.api_helpers import TLS, Api
from stash_pipeline_tests.support.viewer_helpers import World, csrf, login, scored_world
from stash_pipeline_tests.support.waiting import REQUEST_S, bound

COOKIE = "stash_session"


@pytest.fixture
def world(api: Api, tmp_path) -> World:
    return scored_world(api, tmp_path)


def session_of(client: httpx.Client) -> str:
    return client.cookies[COOKIE]


def with_cookie(api: Api, value: str | bytes) -> httpx.Client:
    """A client that sends this Cookie value as raw bytes (UTF-8 for text)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8")
    return httpx.Client(base_url=api.url, headers={"cookie": COOKIE.encode() + b"=" + raw},
                        timeout=bound(REQUEST_S), verify=TLS)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def altered_cookies(valid: str) -> dict[str, str | bytes]:
    who, expires, mac = valid.split(".")
    invalid_utf8, with_nul = b64(b"\xff\xfe"), b64(b"a\x00b")
    return {
        "non-ASCII MAC": f"{who}.{expires}.{mac[:-1]}é",
        "MAC of other hex digits": f"{who}.{expires}.{mac.upper()}",
        "Unicode-digit expiry": f"{who}.{expires[:-1]}².{mac}",
        "Arabic-Indic digits": f"{who}.{'٣' * len(expires)}.{mac}",
        "an expiry of 5,000 digits": f"{who}.{'9' * 5000}.{mac}",
        "non-ASCII account": f"é{who}.{expires}.{mac}",
        "account of invalid UTF-8": f"{invalid_utf8}.{expires}.{mac}",
        "four parts": f"{valid}.x",
        "one part": who,
        "empty parts": "..",
        "NUL in account": f"{with_nul}.{expires}.{mac}",
        "a byte that is not UTF-8": f"{who}.{expires}.".encode() + b"\xff" * 64,
    }


def test_a_saved_cookie_replayed_after_log_out_is_no_session(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    other_browser = login(api, world.alice_key)
    saved = session_of(client)
    token = csrf(client.get("/ui/traces").text)
    response = client.post("/ui/logout", data={"csrf": token})
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    replayed = with_cookie(api, saved)
    assert replayed.get("/ui/traces").status_code == 303
    assert replayed.get(f"/ui/reward-models/{world.model_id}/progress").status_code == 401
    refused = replayed.post(f"/ui/reward-models/{world.model_id}/score", data={"csrf": token})
    assert refused.status_code == 303 and refused.headers["location"].startswith("/ui/login")
    # Log out ends every session of the account (the epoch moved on), and a new login works.
    assert other_browser.get("/ui/traces").status_code == 303
    assert login(api, world.alice_key).get("/ui/traces").status_code == 200
    # The other account's sessions are untouched.
    assert login(api, world.bob_key).get("/ui/traces").status_code == 200


def test_log_out_without_a_valid_session_still_just_logs_out(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    assert client.post("/ui/logout", data={"csrf": token}).status_code == 303
    # The same form again (its cookie is now no session): nothing to end, still no error.
    again = with_cookie(api, session_of(login(api, world.alice_key)))
    assert again.post("/ui/logout", data={"csrf": "é" * 64}).status_code == 403


def test_altered_cookies_are_no_session(api: Api, world: World) -> None:
    valid = session_of(login(api, world.alice_key))
    for name, value in altered_cookies(valid).items():
        client = with_cookie(api, value)
        page = client.get("/ui/traces")
        assert page.status_code == 303 and "/ui/login" in page.headers["location"], name
        assert client.get(f"/ui/reward-models/{world.model_id}/progress").status_code == 401, \
            name
        form = client.post("/ui/logout", data={"csrf": "0" * 64})
        assert form.status_code == 403, (name, form.status_code)
    assert with_cookie(api, valid).get("/ui/traces").status_code == 200


def test_bad_csrf_tokens_are_403(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    for bad in ("é" * 64, token[:-1] + "²", token.upper(), token + "0", "", "\x00" * 64):
        response = client.post("/ui/traces/trace-a/comments",
                               content=f"csrf={httpx.QueryParams({'x': bad})['x']}&text=hi"
                               .encode(), headers={"content-type":
                                                   "application/x-www-form-urlencoded"})
        assert response.status_code == 403, (bad, response.status_code)
        raw = client.post("/ui/traces/trace-a/comments", data={"csrf": bad, "text": "hi"})
        assert raw.status_code == 403, (bad, raw.status_code)
    assert client.post("/ui/traces/trace-a/comments",
                       data={"csrf": token, "text": "hi"}).status_code == 303


@pytest.mark.parametrize("origin", ["http://[x", "http://é.example", "\x7f", "http://[::1",
                                    "://", "null"])
def test_hostile_origin_headers_are_refused_not_a_crash(api: Api, world: World,
                                                         origin: str) -> None:
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    response = client.post("/ui/traces/trace-a/comments", data={"csrf": token, "text": "hi"},
                           headers={"origin": origin.encode("utf-8")})
    assert response.status_code == 403, response.text


def test_unicode_digits_in_query_and_form_values_are_422(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    for query in ("limit=²", "limit=٥٠", "offset=²", "offset=٣", "limit=50&offset=¹"):
        page = client.get(f"/ui/traces?{query}")
        assert page.status_code == 422, (query, page.status_code)
    token = csrf(client.get("/ui/traces").text)
    for field in ("epochs", "max_pairs"):
        for value in ("²", "١", "5²"):
            response = client.post("/ui/reward-models", data={
                "csrf": token, "name": "m", "trace_ids": ["trace-a"], field: value})
            assert response.status_code == 422, (field, value, response.status_code)
    for value in ("²", "١٫٥", "é"):  # the viewer has no rating form; its search has numbers
        searched = client.get("/ui/traces", params={"credit_min": value})
        assert searched.status_code == 422, (value, searched.status_code)


def test_hostile_header_values_never_answer_500(api: Api, world: World) -> None:
    client = login(api, world.alice_key)
    cookie = session_of(client)
    token = csrf(client.get("/ui/traces").text)
    values = ["é", "²", "[", "http://[x", "\x7f", "a" * 8000, "ÿ" * 100, " ", "\t"]
    routes = [("GET", "/ui/traces"), ("GET", "/ui/login"), ("POST", "/ui/login"),
              ("POST", "/ui/logout"), ("GET", "/api/v1/account"), ("GET", "/api/v1/traces"),
              ("GET", "/ui/reward-models"), ("POST", "/ui/traces/trace-a/comments")]
    for header in ("host", "origin", "authorization", "content-type", "referer", "cookie",
                   "x-forwarded-for", "accept", "content-length"):
        for value in values:
            for method, path in routes:
                sent = {"cookie": f"{COOKIE}={cookie}"}
                sent[header] = value if header != "cookie" else f"{COOKIE}={value}"
                try:
                    response = httpx.request(
                        method, api.url + path, data={"csrf": token, "text": "hi"}
                        if method == "POST" else None,
                        headers={k: v.encode("utf-8") for k, v in sent.items()},
                        timeout=bound(REQUEST_S))
                except (httpx.RemoteProtocolError, httpx.LocalProtocolError):
                    continue  # refused by the HTTP layer (h11) before the app: not an answer
                assert response.status_code < 500, (header, value, method, path,
                                                    response.status_code, response.text[:300])
