"""An /api/v1 URL the REST API does not have answers the API's JSON error (404 `not_found`, in the request's
language) for every method, with a key, a session or neither; never Django's HTML 404 page."""

from __future__ import annotations

import pytest
from django.test import Client

from api.models import KeyScope

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete", "options")
UNKNOWN = (
    "/api/v1/usage.json",  # the format suffix docs/api.md says is a 404
    "/api/v1/no-such-thing/",
    "/api/v1/agents/not-a-number/",
    "/api/v1/agents/1/no-such-action/",
    "/api/v1/knowledge-bases/1/documents/1/nope/",
)


def _client(language: str = "en", **headers: str) -> Client:
    return Client(HTTP_ACCEPT_LANGUAGE=language, raise_request_exception=False, **headers)


def _assert_json_404(response, path: str) -> dict:
    assert response.status_code == 404, (path, response.status_code)
    assert response["Content-Type"] == "application/json", path
    error = response.json()["error"]
    assert error["code"] == "not_found" and set(error) == {"code", "message"}
    return error


def test_unknown_api_urls_answer_the_json_error_for_every_method(tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    with_key = _client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    for client in (with_key, _client()):  # a key, and no credentials at all
        for path in UNKNOWN:
            for method in METHODS:
                error = _assert_json_404(getattr(client, method)(path), path)
                assert f"{method.upper()} {path}" in error["message"] and "/api/v1/schema/" in error["message"]


def test_a_session_posting_without_a_csrf_token_gets_the_json_404(tenant_admin):
    client = Client(enforce_csrf_checks=True, HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(tenant_admin)
    _assert_json_404(client.post("/api/v1/usage.json", {"x": 1}), "/api/v1/usage.json")


def test_the_message_follows_the_requests_language():
    error = _assert_json_404(_client("zh-hans").get("/api/v1/usage.json"), "/api/v1/usage.json")
    assert error["message"].startswith("没有这个网址：GET /api/v1/usage.json。")


def test_a_missing_slash_redirects_a_read_and_names_the_url_for_a_write(tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    client = _client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    redirected = client.get("/api/v1/agents?page=2")
    assert (redirected.status_code, redirected["Location"]) == (301, "/api/v1/agents/?page=2")
    assert client.get("/api/v1")["Location"] == "/api/v1/"
    error = _assert_json_404(client.post("/api/v1/agents", {}), "/api/v1/agents")
    assert error["message"].endswith("end with a slash: /api/v1/agents/")


def test_the_apis_own_urls_still_answer(tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    client = _client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/usage/").status_code == 200
    assert client.get("/api/v1/agents/").status_code == 200
    missing = client.get("/api/v1/agents/999999/")  # an object the router knows the URL of: the viewset's own 404
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "No such agent."
    assert client.get("/api/v1/schema/").status_code == 200
