"""An image_url part's http(s) URL, downloaded on the client's behalf through the platform's network guard
(core.netguard), as the http_request tool and model providers are: every address the host resolves to must lie
outside ATTACHMENT_URL_BLOCKED_NETWORKS (default: every range that is not the public internet), the request goes to
the checked address (Host header and TLS server name set to the name, so DNS rebinding cannot reach an internal
host), each redirect is checked again, and the download is bounded in bytes (ATTACHMENT_MAX_BYTES) and in time
(ATTACHMENT_URL_TIMEOUT). No cookie, no credential of the platform's and no environment proxy is used."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
from django.utils.translation import gettext as _

from core.conf import setting
from core.netguard import DEFAULT_BLOCKED_NETWORKS, Network, UnresolvedHost, check_url, networks

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


@dataclass(frozen=True)
class _Target:
    url: httpx.URL
    host: str
    address: str


async def _checked(url: httpx.URL) -> _Target:
    """The URL's host resolved once, every address outside the blocked networks."""
    if url.scheme not in ("http", "https"):
        raise FetchRefused(_("Only http:// and https:// image URLs are fetched."))
    try:
        checked = await asyncio.to_thread(check_url, str(url), _blocked())
    except UnresolvedHost:
        raise FetchRefused(_("The host of the image URL does not resolve.")) from None
    if checked.private:
        raise FetchRefused(_("The image URL points to a private or reserved address, which is never fetched."))
    return _Target(url=url, host=checked.host, address=checked.address)


async def _body(response: httpx.Response, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise FetchRefused(_("The image at the URL is larger than %(max)s MB.") % {"max": limit // (1024 * 1024)})
        chunks.append(chunk)
    return b"".join(chunks)


async def _download(client: httpx.AsyncClient, url: httpx.URL, limit: int) -> bytes:
    for _hop in range(MAX_REDIRECTS + 1):
        target = await _checked(url)
        request = client.build_request(
            "GET", url.copy_with(host=target.address),
            headers={"Host": url.netloc.decode("ascii"), "User-Agent": USER_AGENT, "Accept": "image/*, */*;q=0.5"},
            extensions={"sni_hostname": target.host} if url.scheme == "https" else {},
        )  # fmt: skip
        response = await client.send(request, stream=True)
        try:
            if response.is_redirect and "location" in response.headers:
                url = url.join(response.headers["location"])
                continue
            if response.status_code != 200:
                raise FetchRefused(_("The image URL answered HTTP %(status)s.") % {"status": response.status_code})
            return await _body(response, limit)
        finally:
            await response.aclose()
    raise FetchRefused(_("The image URL redirects more than %(max)s times.") % {"max": MAX_REDIRECTS})


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
