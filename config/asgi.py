"""ASGI entry point, served by Daphne: HTTP through Django, websockets through Channels."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Django must be set up before anything imports models (the routing does).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from api.mcp_server import mount_mcp  # noqa: E402
from config.api_handler import route_api  # noqa: E402
from config.body_limit import install as install_body_limit  # noqa: E402
from config.origin import SameOriginValidator  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from core.registry import require_slots  # noqa: E402

# A registration an app should have made (the conversation page, the server-turn runner) refuses the start.
require_slots()

# Daphne reads a whole request body before the application sees it: bound it while it is read.
install_body_limit()

# Everything imported so far lives as long as the process: move it out of the garbage collector's sight, so that a
# full collection under load scans only what requests and turns allocate (measured in docs/operations.md).
gc.collect()
gc.freeze()

application = ProtocolTypeRouter(
    {
        # /mcp: the agents as an MCP server (api.mcp_server); key requests (/v1, /api with a Bearer key): Django
        # with API_MIDDLEWARE (config.api_handler); everything else: Django with MIDDLEWARE.
        "http": mount_mcp(route_api(django_asgi_app)),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
