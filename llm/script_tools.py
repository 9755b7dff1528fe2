"""How the scripted model reads a user's message as a real model would: which offered tool it names, the arguments it
gives that tool, and the JSON object it asks for. Deterministic, offline, Chinese and English.

A message names a tool by the tool's name (or, for `mcp__server__tool`, its last part), by one of the labels people
read it by (`ToolLabels`: the demo model is given the agents' labels, llm.demo), or by words of its description: the
tool whose description shares most words with the message (a word several tools share counts less) is the one meant.
Words are English words of three letters or more and pairs of Chinese characters, common words left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# A tool's name -> the labels people call it by (English, Chinese...); empty when unknown.
ToolLabels = Callable[[str], Sequence[str]]

# fmt: off
_ENGLISH_COMMON = frozenset({
    "about", "also", "and", "any", "are", "ask", "asks", "back", "but", "call", "called", "calls", "can", "could",
    "did", "does", "done", "each", "for", "from", "get", "gets", "give", "given", "gives", "had", "has", "have",
    "her", "here", "his", "how", "into", "its", "just", "let", "like", "make", "made", "may", "more", "most", "need",
    "not", "now", "one", "only", "other", "our", "out", "please", "return", "returns", "say", "says", "should",
    "some", "tell", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "tool", "tools", "two", "use", "used", "uses", "using", "want", "was", "were", "what", "when", "where", "which",
    "who", "why", "will", "with", "would", "you", "your", "user", "users", "function",
})
# fmt: on
_CHINESE_FUNCTION_CHARACTERS = frozenset(
    "的了是在和与或及把被给为这那个我你他她它们吗呢吧啊么请帮之其也都就还而并从对向于等您"
)
_CHINESE_COMMON = frozenset(
    {"工具", "调用", "用户", "返回", "可以", "需要", "什么", "怎么", "一下", "时候", "应用", "使用"}
)
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
_ENGLISH_WORD = re.compile(r"[a-z]{3,}")
_TOOL_NAME_PART = re.compile(r"[A-Za-z0-9]+")


def _stem(word: str) -> str:
    """An English word without its plural or third-person ending, so that "cities" and "city" meet ("cit")."""
    for ending in ("ies", "es", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word.rstrip("y") if len(word) > 3 else word


def words(text: str) -> set[str]:
    """The words of `text` that can say which tool is meant: English words (stemmed) and Chinese character pairs."""
    found = {_stem(word) for word in _ENGLISH_WORD.findall(text.lower()) if word not in _ENGLISH_COMMON}
    for run in _CJK_RUN.findall(text):
        for start in range(len(run) - 1):
            pair = run[start : start + 2]
            if pair not in _CHINESE_COMMON and not _CHINESE_FUNCTION_CHARACTERS.intersection(pair):
                found.add(pair)
    return found


def _name_words(name: str) -> set[str]:
    """The words of a tool's own name (`get_weather` -> weather; of `mcp__server__tool` only the tool's), as
    description words."""
    return words(" ".join(_TOOL_NAME_PART.findall(name.rsplit("__", 1)[-1].replace("_", " "))))


def offered_tools(request: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The offered function tools of a chat request, by name."""
    offered = {}
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and function.get("name"):
            offered[str(function["name"])] = function
    return offered


def _mentions(phrase: str, text: str) -> bool:
    """Whether `text` says `phrase` (case-insensitive; an ASCII phrase as a whole word)."""
    phrase = phrase.strip()
    if len(phrase) < 2:
        return False
    if phrase.isascii():
        return re.search(rf"(?<![A-Za-z0-9_]){re.escape(phrase)}(?![A-Za-z0-9_])", text, re.IGNORECASE) is not None
    return phrase.lower() in text.lower()


def _names_of(name: str, labels: ToolLabels | None) -> list[str]:
    """What a tool is called by: its name, its last part after "__", its labels and a label's parts after "›"."""
    names = [name, name.rsplit("__", 1)[-1]]
    for label in labels(name) if labels is not None else ():
        names += [label, *(part for part in re.split(r"\s*[›>]\s*", label) if part != label)]
    return names


def named_tool(text: str, offered: Mapping[str, Mapping[str, Any]], labels: ToolLabels | None = None) -> str | None:
    """The offered tool that `text` names (module docstring), or None when it names none."""
    for name in offered:
        if any(_mentions(called, text) for called in _names_of(name, labels)):
            return name
    said = words(text)
    bags = {
        name: words(str(function.get("description") or "")) | _name_words(name) for name, function in offered.items()
    }
    best, best_score = None, 0.0
    for name, bag in bags.items():
        score = sum(1 / sum(word in other for other in bags.values()) for word in bag & said)
        if score > best_score:
            best, best_score = name, score
    return best


# --- arguments ----------------------------------------------------------------------------------------------------


def said_value(prop: str, text: str) -> str | None:
    """The value the text gives a property as "prop: value" or "prop = value" (quoted, or up to , ; or a line end)."""
    match = re.search(rf"\b{re.escape(prop)}\s*[:=：]\s*(?:\"([^\"]*)\"|([^,;，；\n]+))", text, re.IGNORECASE)
    if match is None:
        return None
    return (match.group(1) if match.group(1) is not None else match.group(2)).strip().rstrip(".。")


def enum_aliases(schema: Mapping[str, Any]) -> dict[Any, list[str]]:
    """Each enum value of a property with the words its description gives it in brackets after it:
    "km (公里, 千米, kilometre)" -> {"km": ["km", "公里", "千米", "kilometre"]}."""
    description = str(schema.get("description") or "")
    aliases: dict[Any, list[str]] = {}
    for value in schema.get("enum") or []:
        found = [str(value)]
        bracket = re.search(rf"(?<![\w]){re.escape(str(value))}\s*[（(]([^)）]*)[)）]", description)
        if bracket:
            found += [word.strip() for word in re.split(r"[,，、/;；]", bracket.group(1)) if word.strip()]
        aliases[value] = found
    return aliases


def _mentioned_enum(schema: Mapping[str, Any], text: str, taken: set[int]) -> Any:
    """The enum value the text mentions first (by itself or an alias), at a place no other property took."""
    best: tuple[int, Any] | None = None
    for value, names in enum_aliases(schema).items():
        for called in names:
            pattern = (
                rf"(?<![A-Za-z0-9_]){re.escape(called)}(?![A-Za-z0-9_])" if called.isascii() else re.escape(called)
            )
            for match in re.finditer(pattern, text, re.IGNORECASE):
                if match.start() not in taken and (best is None or match.start() < best[0]):
                    best = (match.start(), value)
    if best is None:
        return None
    taken.add(best[0])
    return best[1]


def _scalar(kind: str, said: str | None, schema: Mapping[str, Any], text: str) -> Any:
    if kind in ("integer", "number"):
        found = re.search(r"-?\d+(?:\.\d+)?", said if said is not None else text)
        number = float(found.group()) if found else 0
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        return (said or "").lower() in ("true", "yes", "1")
    if kind == "null":
        return None
    if schema.get("enum"):
        return said if said in schema["enum"] else schema["enum"][0]
    return said if said is not None else text


def schema_value(schema: Mapping[str, Any], text: str, root: Mapping[str, Any] | None = None, prop: str = "") -> Any:
    """A deterministic value of a JSON schema, read from `text` ("property: value"): what the scripted model
    answers for a structured output or a tool's arguments."""
    root = root or schema
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return schema_value(target, text, root, prop)
    for key in ("anyOf", "oneOf", "allOf"):
        options = [option for option in schema.get(key) or [] if option.get("type") != "null"]
        if options:
            return schema_value(options[0], text, root, prop)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_value(sub, text, root, name) for name, sub in properties.items()}
    said = said_value(prop, text) if prop else None
    if kind == "array":
        if said is None:
            return []
        item = schema.get("items") or {}
        return [_scalar(item.get("type", "string"), part.strip(), item, text) for part in said.split("|")]
    return _scalar(kind, said, schema, text)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _argument(
    schema: Mapping[str, Any], prop: str, text: str, taken: set[int], root: Mapping[str, Any]
) -> tuple[bool, Any]:
    """(found, value) of one property read from the message: said as "prop: value", an enum value it mentions, a
    number it gives; (False, a fallback) when the message gives nothing for it."""
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    said = said_value(prop, text)
    if kind in ("object", "array") or any(key in schema for key in ("$ref", "anyOf", "oneOf", "allOf")):
        return said is not None, schema_value(schema, text, root, prop)
    if schema.get("enum"):
        if said is not None and said in schema["enum"]:
            return True, said
        mentioned = _mentioned_enum(schema, text, taken)
        return (True, mentioned) if mentioned is not None else (False, schema["enum"][0])
    if kind in ("integer", "number"):
        number = _NUMBER.search(said if said is not None else text)
        if number is None:
            return False, 0
        value = float(number.group())
        return True, int(value) if kind == "integer" else value
    if kind == "boolean":
        return said is not None, (said or "").lower() in ("true", "yes", "1", "是", "对")
    if said is not None:
        return True, said
    return False, text


def tool_arguments(parameters: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The arguments of a call of a tool with these parameters, read from the message: each property as
    `_argument` reads it; a required property the message gives nothing for gets a fallback (a string: the whole
    message), an optional one is left out. Properties are read in the order `required` lists them, then the others:
    the first one takes the first value the message mentions ("100 华氏度是多少摄氏度": from °F, to °C). A schema
    stored as PostgreSQL's jsonb has lost its properties' order (it sorts keys by length); a JSON list keeps it."""
    properties = parameters.get("properties") or {}
    required = [prop for prop in parameters.get("required") or [] if prop in properties]
    taken: set[int] = set()
    read = {}
    for prop in [*required, *(prop for prop in properties if prop not in required)]:
        schema = properties[prop]
        if not isinstance(schema, Mapping):
            continue
        found, value = _argument(schema, prop, text, taken, parameters)
        if found or prop in required:
            read[prop] = value
    return {prop: read[prop] for prop in properties if prop in read}


# --- JSON mode ----------------------------------------------------------------------------------------------------

_KEY = r"[A-Za-z_\u4e00-\u9fff](?:(?![和及与])[\w\u4e00-\u9fff])*"
_KEY_SEPARATOR = r"\s*(?:,|、|\band\b|和|及|与)\s*"
_KEY_LIST = re.compile(
    rf"(?:\bkeys?|\bfields?|\bproperties|字段|键|属性)\s*(?:[:：]|\bare\b|为|是|包括|包含)\s*"
    rf"(?P<keys>{_KEY}(?:{_KEY_SEPARATOR}{_KEY})*)",
    re.IGNORECASE,
)
_TEMPLATE_KEY = re.compile(r"[\"“]([\w\u4e00-\u9fff]+)[\"”]\s*[:：]")
_PAIR = re.compile(r"(?<![\w\u4e00-\u9fff])([A-Za-z_]\w*)\s*[:=：]\s*(?:\"([^\"]*)\"|([^,;，；\n]+))")


def asked_keys(text: str) -> list[str]:
    """The keys a request asks its JSON object to have: listed after "keys"/"fields"/"字段" ("fields: city, weather",
    "字段为城市和天气") or written as a template (`{"name": …, "age": …}`)."""
    keys: list[str] = []
    for match in _KEY_LIST.finditer(text):
        keys += [key for key in re.split(_KEY_SEPARATOR, match.group("keys")) if key]
    keys += _TEMPLATE_KEY.findall(text)
    return list(dict.fromkeys(keys))


def _typed(value: str) -> Any:
    """A said value as JSON holds it: a number when it is one, else the text."""
    return json.loads(value) if re.fullmatch(r"-?\d+(?:\.\d+)?", value) else value


def _object(text: str | None) -> dict[str, Any] | None:
    """`text` as a JSON object, or None when it is not one."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_object_for(*, instructions: str, message: str, answer: str, tool_result: str | None) -> dict[str, Any]:
    """The JSON object that answers a json_object request, the first of: `answer` when it is an object; the keys
    `instructions` (the system prompt and the user's message) ask for, each with the value the message says
    ("key: value"), else the tool result's, else the answer; the tool result when it is an object; the
    "key: value" pairs of the user's `message`; {"reply": answer}."""
    own = _object(answer)
    if own is not None:
        return own
    result = _object(tool_result) or {}
    keys = asked_keys(instructions)
    if keys:
        said = {key: said_value(key, message) for key in keys}
        return {key: _typed(said[key]) if said[key] is not None else result.get(key, answer) for key in keys}
    if result:
        return result
    pairs = {
        match.group(1): _typed((match.group(2) if match.group(2) is not None else match.group(3)).strip())
        for match in _PAIR.finditer(message)
    }
    return pairs or {"reply": answer}
