"""The REST API's answer to a refused message (engine.admission.Refusal): its status, `{"error": {"code", "message"}}`
and a Retry-After when the refusal has one. The OpenAI-compatible endpoint maps refusals in api.openai_request
(ApiError.of_refusal), /mcp in api.mcp_server; the decision is the engine's, the shape the door's."""

from __future__ import annotations

from django.http import JsonResponse

from engine.admission import Refusal


def refusal_response(refusal: Refusal) -> JsonResponse:
    response = JsonResponse(
        {"error": {"code": str(refusal.code), "message": refusal.message}},
        status=refusal.status,
        json_dumps_params={"ensure_ascii": False},
    )
    if refusal.retry_after is not None:
        response["Retry-After"] = str(max(1, refusal.retry_after))
    return response
