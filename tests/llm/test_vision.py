"""Which models see images (llm.vision), how an image travels in a chat message (ChatMessage.parts) and what it costs
(llm.tokens: OpenAI's image formula)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from llm.messages import ChatMessage
from llm.models import ModelProvider
from llm.tokens import count_messages, image_tokens, part_tokens
from llm.vision import is_vision, known_vision


@pytest.mark.parametrize(
    "model",
    ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-5", "o3", "o4-mini", "qwen-vl-max", "qwen2.5-vl-72b-instruct",
     "glm-4v-plus", "claude-3-5-sonnet", "gemini-2.0-flash", "llava:13b", "minicpm-v", "internvl2", "openai/gpt-4o"],
)  # fmt: skip
def test_known_vision_families(model):
    assert known_vision(model)


@pytest.mark.parametrize(
    "model", ["gpt-4", "gpt-3.5-turbo", "deepseek-chat", "qwen-max", "demo-scripted", "scripted", ""]
)
def test_text_only_models(model):
    assert not known_vision(model)


def test_a_providers_entry_decides_over_the_name():
    provider = ModelProvider(
        chat_models=[{"name": "gpt-4o", "vision": False}, {"name": "scripted", "vision": True}, {"name": "qwen-vl"}],
        default_chat_model="scripted",
    )
    assert not is_vision(provider, "gpt-4o")
    assert is_vision(provider, "scripted")
    assert is_vision(provider, None)  # the default chat model
    assert is_vision(provider, "qwen-vl")  # no "vision" key: by its name
    assert not is_vision(None, "gpt-4")


def _png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_a_message_with_parts_is_sent_as_a_list_and_read_back():
    part = {"type": "image_url", "image_url": {"url": _png(8, 8), "detail": "auto"}}
    message = ChatMessage.user("What is this?", parts=[part])
    wire = message.as_dict()
    assert wire == {"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}
    assert ChatMessage.from_dict(wire) == message
    assert ChatMessage.user("", parts=[part]).as_dict()["content"] == [part]  # no empty text part
    assert ChatMessage.user("plain").as_dict() == {"role": "user", "content": "plain"}


def test_openai_image_formula():
    assert image_tokens(1024, 1024, "low") == 85
    assert image_tokens(1024, 1024) == 85 + 170 * 4  # 768x768: four tiles
    assert image_tokens(2048, 4096) == 85 + 170 * 6  # 1024x2048 -> 768x1536: two by three tiles
    assert image_tokens(300, 200) == 85 + 170


def test_an_image_part_is_counted_by_its_size():
    small = {"type": "image_url", "image_url": {"url": _png(300, 200)}}
    large = {"type": "image_url", "image_url": {"url": _png(1600, 1200), "detail": "high"}}
    assert part_tokens(small) == 85 + 170
    assert part_tokens(large) == image_tokens(1600, 1200)
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    assert part_tokens(remote) == 85 + 170 * 4  # size unknown: a 1024x1024 image's cost
    text_only = count_messages([ChatMessage.user("Hello").as_dict()])
    with_image = count_messages([ChatMessage.user("Hello", parts=[small]).as_dict()])
    assert with_image == text_only + 85 + 170
