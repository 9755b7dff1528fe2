"""The REST API's answer to a refused message (engine.admission.Refusal): its status, `{"error": {"code", "message"}}`
and a Retry-After when the refusal has one. The OpenAI-compatible endpoint maps refusals in api.openai_request
(ApiError.of_refusal), /mcp in api.mcp_server; the decision is the engine's, the shape the door's."""

from __future__ import annotations

from django.http import JsonResponse

from engine.admission import Refusal


def error_response(status: int, code: str, message: str, retry_after: float | None = None) -> JsonResponse:
    """The REST API's error object (api.rest's exception handler writes the same shape for DRF's exceptions)."""
    response = JsonResponse(
        {"error": {"code": code, "message": message}}, status=status, json_dumps_params={"ensure_ascii": False}
    )
    if retry_after is not None:
        response["Retry-After"] = str(max(1, round(retry_after)))
    return response


def refusal_response(refusal: Refusal) -> JsonResponse:
    return error_response(refusal.status, str(refusal.code), refusal.message, refusal.retry_after)
