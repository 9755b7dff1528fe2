"""Token counts equal tiktoken's, for English, Chinese and mixed chat messages, with no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tiktoken

from llm import tokens

FIXTURE = [
    {"role": "system", "content": "You are a helpful assistant for a restaurant. Answer briefly."},
    {"role": "user", "content": "What is on the menu today?"},
    {"role": "assistant", "content": "今天的菜单有：宫保鸡丁、麻婆豆腐和清蒸鲈鱼。"},
    {"role": "user", "name": "li_lei", "content": "麻婆豆腐 is spicy? 我不能吃太辣的 food。"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "menu_lookup", "arguments": '{"dish": "麻婆豆腐"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"spicy": true, "辣度": 3}'},
]

# The OpenAI cookbook's example: 129 prompt tokens for gpt-3.5-turbo-0613 and gpt-4-0613, as the API reports.
COOKBOOK = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",  # noqa: E501
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",  # noqa: E501
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]


def tiktoken_reference(messages, encoding) -> int:
    """The cookbook's num_tokens_from_messages, written against tiktoken directly."""
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            if key == "tool_calls":
                value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            if value is None:
                continue
            total += len(encoding.encode(value))
            if key == "name":
                total += 1
    return total


def test_counts_equal_tiktoken_for_english_chinese_and_mixed():
    tokens.seed_tiktoken_cache()
    reference = tiktoken.get_encoding("cl100k_base")
    for text in ("Hello, world!", "你好，世界。我们今天吃什么？", "Mixed 中英文 text with emoji 🍜 and numbers 12345"):
        assert tokens.count_text(text, "gpt-4") == len(reference.encode(text))
    assert tokens.count_messages(FIXTURE, "gpt-4") == tiktoken_reference(FIXTURE, reference)
    assert tokens.count_messages(COOKBOOK, "gpt-4") == 129
    assert tokens.count_messages(COOKBOOK, "gpt-3.5-turbo-0613") == 129


def test_encoding_is_chosen_per_model():
    assert tokens.encoding_name_for_model("gpt-4") == "cl100k_base"
    assert tokens.encoding_name_for_model("gpt-4o-mini") == "o200k_base"
    assert tokens.encoding_name_for_model("deepseek-chat") == "cl100k_base"
    assert tokens.encoding_name_for_model("qwen-plus") == "cl100k_base"
    # o200k_base is used only when it is in tiktoken's cache; otherwise its models are counted with cl100k_base.
    expected = (
        "o200k_base" if tokens.cache_path("o200k_base") and tokens.cache_path("o200k_base").is_file() else "cl100k_base"
    )
    assert tokens.encoding_for_model("gpt-4o").name.startswith(expected)


def test_upper_bound_is_never_below_the_count():
    assert tokens.upper_bound_messages(FIXTURE) >= tokens.count_messages(FIXTURE, "gpt-4")


def test_counting_works_with_no_network_and_an_empty_cache(tmp_path: Path):
    """A fresh process, a proxy that refuses everything, an empty tiktoken cache: counts are still exact."""
    script = f"""
import json, tiktoken
from llm import tokens
messages = json.loads({json.dumps(json.dumps(FIXTURE))})
print(json.dumps([tokens.count_messages(messages, "gpt-4"), tokens.count_text("你好 world"),
                  len(tiktoken.get_encoding("cl100k_base").encode("你好 world"))]))
"""
    cache = tmp_path / "tiktoken-cache"
    env = {
        **os.environ,
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "http_proxy": "http://127.0.0.1:9",
        "TIKTOKEN_CACHE_DIR": str(cache),
    }
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    counted, text_count, tiktoken_count = json.loads(result.stdout)
    assert counted == tiktoken_reference(FIXTURE, tiktoken.get_encoding("cl100k_base"))
    assert text_count == tiktoken_count
    assert tokens.cache_path("cl100k_base").name in os.listdir(cache)  # the cache was seeded from the package
