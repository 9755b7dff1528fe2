"""What an OAuth-minded MCP client finds when /mcp refuses its key: the platform takes API keys, not OAuth, and says
so where such a client reads it.

/mcp answers a missing or wrong key with 401 and a Bearer challenge (api.mcp_server). A client given a key in a
header, as Claude Desktop's bridge `mcp-remote --header "Authorization: Bearer …"` is, then starts OAuth (the
TypeScript SDK does, on any 401): it looks for the protected resource's metadata (RFC 9728), then the authorization
server's (RFC 8414), and registers itself (RFC 7591). Found nowhere, it registered at `/register`, got this site's
404 page, and ended in "Dynamic Client Registration rejected (HTTP 404)", the HTML page after it, then a fall-back
to the old SSE transport and its 405: never a word about the key.

So: the protected resource metadata is a JSON 404 saying the server takes API keys (the SDK goes on without it); the
authorization server metadata names this site's registration endpoint, which refuses every registration (400,
RFC 7591's `invalid_client_metadata`) with the key's own refusal as `error_description`: the request carries the
bridge's headers, its key with them, so the description says which refusal it is ("This API key is not valid.
(invalid_api_key) …", "… does not have the “mcp” scope …", "Send an API key …"), in the request's language.
mcp-remote ends with that text ("Fatal error: … Dynamic Client Registration rejected (HTTP 400): {…"error_description":
"This API key is not valid. …"}"), in Claude Desktop's log of the server. The metadata's authorization endpoint is the
API keys page (where a person opening it makes a key), its token endpoint refuses every grant the same way.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from api.keys import KeyRefused, authenticate_key, bearer_secret
from api.mcp_server import key_refusal
from api.models import KeyScope

REGISTRATION_PATH = "/mcp/oauth/register"
GRANTS_PATH = "/mcp/oauth/token"
KEYS_PAGE = "/api/keys/"


def _no_oauth() -> str:
    return _(
        "This MCP server takes an API key, not OAuth: send it as the header “Authorization: Bearer <key>” (a key "
        "with the “mcp” scope, made on the API keys page, /api/keys/)."
    )


def _key_problem(request: HttpRequest) -> str:
    """What is wrong with the request's key for /mcp, said as /mcp says it; the OAuth refusal when nothing is."""
    try:
        authenticate_key(bearer_secret(request.headers.get("Authorization"))).require(KeyScope.MCP)
    except KeyRefused as exc:
        message, _headers = key_refusal(exc)
        return message
    return _no_oauth()


@require_GET
def protected_resource(request: HttpRequest, resource: str = "") -> JsonResponse:
    """/.well-known/oauth-protected-resource[/mcp]: not an OAuth-protected resource (RFC 9728), said in JSON."""
    return JsonResponse({"error": "not_found", "error_description": _no_oauth()}, status=404,
                        json_dumps_params={"ensure_ascii": False})  # fmt: skip


@require_GET
def authorization_server(request: HttpRequest) -> JsonResponse:
    """/.well-known/oauth-authorization-server (RFC 8414): where an OAuth client registers, to be told about keys."""
    origin = request.build_absolute_uri("/").rstrip("/")
    return JsonResponse({
        "issuer": origin,
        "authorization_endpoint": origin + KEYS_PAGE,
        "token_endpoint": origin + GRANTS_PATH,
        "registration_endpoint": origin + REGISTRATION_PATH,
        "response_types_supported": ["code"],
        "grant_types_supported": [],
        "service_documentation": origin + KEYS_PAGE,
    })  # fmt: skip


@csrf_exempt  # a program's POST, with no session
@require_POST
def register(request: HttpRequest) -> JsonResponse:
    """Every registration refused (RFC 7591 §3.2.2), its description the key's refusal."""
    body = {"error": "invalid_client_metadata", "error_description": _key_problem(request)}
    return JsonResponse(body, status=400, json_dumps_params={"ensure_ascii": False})


@csrf_exempt  # a program's POST, with no session
@require_POST
def token(request: HttpRequest) -> JsonResponse:
    """Every grant refused (RFC 6749 §5.2), its description the key's refusal."""
    body = {"error": "unsupported_grant_type", "error_description": _key_problem(request)}
    return JsonResponse(body, status=400, json_dumps_params={"ensure_ascii": False})
