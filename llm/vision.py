"""Which chat models see images (issue 37): a provider's `chat_models` entry says so with "vision": true/false; a
model whose entry does not say is judged by its name, from the families known to take OpenAI `image_url` parts.

A vision model gets an image sent in a conversation as the image itself; any other model gets the text read from it
by OCR (memory.attachments). The offline demo model and the scripted test model read text only, unless their entry
says "vision": true.
"""

from __future__ import annotations

import re
from typing import Any

# Names (without a vendor prefix such as "openai/") of models known to take images; matched from the start.
KNOWN_VISION = re.compile(
    r"^(?:gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|o1(?!-mini)|o3|o4"
    r"|qwen-vl|qwen2-vl|qwen2\.5-vl|qwen3-vl|qvq|glm-4v|glm-4\.1v|glm-4\.5v"
    r"|claude-3|claude-(?:opus|sonnet|haiku)-4|claude-4|gemini|llava|bakllava|minicpm-v|internvl|pixtral"
    r"|llama-3\.2-\d+b-vision|llama-4)",
    re.IGNORECASE,
)


def known_vision(model: str) -> bool:
    """Whether `model`'s name is one of the known vision families (the preset when its entry says nothing)."""
    name = (model or "").strip().rsplit("/", 1)[-1]
    return bool(name) and KNOWN_VISION.match(name) is not None


def is_vision(provider: Any, model: str | None) -> bool:
    """Whether `model` of `provider` (an llm.models.ModelProvider, or None) takes images: its chat_models entry's
    "vision" when set, else the known families."""
    name = model or (getattr(provider, "default_chat_model", "") if provider is not None else "")
    if provider is not None:
        entry = provider.model_info(name)
        if isinstance(entry.get("vision"), bool):
            return entry["vision"]
    return known_vision(name or "")
