"""An image_url part's http(s) URL, downloaded on the client's behalf through the platform's network guard
(core.netguard), as the http_request tool and model providers are: every address the host resolves to must lie
outside ATTACHMENT_URL_BLOCKED_NETWORKS (default: every range that is not the public internet), the request goes to
the checked address (Host header and TLS server name set to the name, so DNS rebinding cannot reach an internal
host), each redirect is checked again, and the download is bounded in bytes (ATTACHMENT_MAX_BYTES) and in time
(ATTACHMENT_URL_TIMEOUT). No cookie, no credential of the platform's and no environment proxy is used."""

from __future__ import annotations

import asyncio

import httpx
from django.utils.translation import gettext as _

from core.conf import setting
from core.netguard import (
    DEFAULT_BLOCKED_NETWORKS,
    Network,
    Pinned,
    UnresolvedHost,
    bounded_body,
    check_url,
    networks,
    pinned_response,
)

MAX_REDIRECTS = 3
USER_AGENT = "agentplat-attachments/1"


class FetchRefused(Exception):
    """The URL could not be downloaded; `message` (translated) says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _blocked() -> list[Network]:
    return networks(setting("ATTACHMENT_URL_BLOCKED_NETWORKS") or DEFAULT_BLOCKED_NETWORKS)


def _timeout() -> float:
    return float(setting("ATTACHMENT_URL_TIMEOUT"))


async def _checked(url: httpx.URL) -> Pinned:
    """The URL's host resolved once, every address outside the blocked networks."""
    if url.scheme not in ("http", "https"):
        raise FetchRefused(_("Only http:// and https:// image URLs are fetched."))
    try:
        checked = await asyncio.to_thread(check_url, str(url), _blocked())
    except UnresolvedHost:
        raise FetchRefused(_("The host of the image URL does not resolve.")) from None
    if checked.private:
        raise FetchRefused(_("The image URL points to a private or reserved address, which is never fetched."))
    return Pinned(url=url, host=checked.host, address=checked.address)


def _too_many() -> FetchRefused:
    return FetchRefused(_("The image URL redirects more than %(max)s times.") % {"max": MAX_REDIRECTS})


async def _download(client: httpx.AsyncClient, url: httpx.URL, limit: int) -> bytes:
    headers = {"User-Agent": USER_AGENT, "Accept": "image/*, */*;q=0.5"}
    pinned = pinned_response(
        client, "GET", url, check=_checked, too_many_redirects=_too_many, max_redirects=MAX_REDIRECTS, headers=headers
    )
    async with pinned as (_url, response):
        if response.status_code != 200:
            raise FetchRefused(_("The image URL answered HTTP %(status)s.") % {"status": response.status_code})
        megabytes = limit // (1024 * 1024)
        return await bounded_body(
            response,
            limit,
            lambda: FetchRefused(_("The image at the URL is larger than %(max)s MB.") % {"max": megabytes}),
        )


async def fetch_image(url: str) -> bytes:
    """The bytes at `url` (an image_url part's), within the guard's bounds; FetchRefused says why not."""
    limit = int(setting("ATTACHMENT_MAX_BYTES"))
    timeout = _timeout()
    try:
        async with asyncio.timeout(timeout):
            async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=timeout) as client:
                return await _download(client, httpx.URL(url), limit)
    except TimeoutError:
        raise FetchRefused(
            _("The image URL did not answer within %(seconds)s seconds.") % {"seconds": timeout}
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        message = _("The image URL could not be fetched: %(error)s") % {"error": type(exc).__name__}
        raise FetchRefused(message) from None
