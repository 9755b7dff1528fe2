"""A stream's place is freed when the request's task is cancelled while the release waits for its worker thread
(the openai SDK closes the connection as soon as it has read `data: [DONE]`, and Django cancels the request's task
on the disconnect)."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from django.core.cache import cache

from engine.places import holding, stream_slot_take


async def test_a_streams_place_is_freed_when_the_client_leaves_during_the_release():
    cache.clear()
    slot = stream_slot_take(1, 1)
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(1)
    loop.set_default_executor(executor)
    busy = threading.Event()
    blocker = loop.run_in_executor(None, busy.wait)  # the worker threads busy, as on a loaded machine

    async def chunks():
        yield "data: [DONE]\n\n"

    async def door():  # Django's send_response, reduced
        async for _chunk in holding(slot, chunks()):
            pass

    task = asyncio.create_task(door())
    for _ in range(10):  # until the generator has ended and its release waits for a thread
        await asyncio.sleep(0)
    task.cancel()  # the client disconnected after [DONE]
    await asyncio.gather(task, return_exceptions=True)
    busy.set()
    await blocker
    executor.shutdown(wait=True)
    assert cache.get(slot.key) is None
