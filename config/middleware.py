"""WhiteNoise in both modes. WhiteNoise's middleware is sync only, and one sync middleware makes Django run the whole
chain, async views included, on a worker thread: an API answer streamed by an async view would then start its turn
on a thread that ends with the request. Static files are found and opened on a thread; other requests pass through
on the event loop."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from whitenoise.middleware import WhiteNoiseMiddleware

from core.middleware import DualModeMiddleware


class StaticFilesMiddleware(DualModeMiddleware, WhiteNoiseMiddleware):
    def __init__(self, get_response: Any = None) -> None:
        WhiteNoiseMiddleware.__init__(self, get_response)
        DualModeMiddleware.__init__(self, get_response)

    def handle(self, request: HttpRequest) -> Any:
        return WhiteNoiseMiddleware.__call__(self, request)

    def _static_file(self, request: HttpRequest) -> Any:
        return self.find_file(request.path_info) if self.autorefresh else self.files.get(request.path_info)

    async def ahandle(self, request: HttpRequest) -> Any:
        static_file = (
            await sync_to_async(self._static_file)(request) if self.autorefresh else self._static_file(request)
        )
        if static_file is not None:
            return await sync_to_async(self.serve)(static_file, request)
        return await self.get_response(request)
