"""Seed 1's knowledge-base plugin `plugin_ai_knowledge_base_query` (K6), for agents and workflows.

A knowledge base named in the call is looked up in the caller's tenant; with no name, the agent's attached knowledge
bases are searched (those of the conversation's agent version). Results carry their document and position, and the
answer is asked to cite them as [document #position]."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.config import agent_config, conversation_config
from agents.models import Agent
from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool
from core.db import database_sync_to_async
from knowledge.models import KnowledgeBase
from knowledge.retrieval import search_many
from memory.models import Conversation
from tenants.scope import tenant_scope

# `field` (seed 1): which part of the knowledge base to query. These names choose the retriever; any other name
# picks that field of each result's record (a JSON or CSV record's column, e.g. "name").
FIELD_MODES = {
    "": "hybrid",
    "hybrid": "hybrid",
    "all": "hybrid",
    "embedding": "vector",
    "vector": "vector",
    "keyword": "keyword",
    "text": "keyword",
}
MAX_TOP_K = 20


def _knowledge_bases(call: ToolCallContext, name: str) -> list[Any]:
    if name:
        knowledge_base = KnowledgeBase.objects.filter(name=name).first()
        if knowledge_base is None:
            raise ToolError(_("There is no knowledge base named “%(name)s”.") % {"name": name})
        return [knowledge_base]
    ids = _attached_ids(call)
    knowledge_bases = list(KnowledgeBase.objects.filter(pk__in=ids))
    if not knowledge_bases:
        raise ToolError(_("No knowledge base is attached to this agent: name one with knowledge_base_name."))
    return knowledge_bases


def _attached_ids(call: ToolCallContext) -> list[int]:
    """The knowledge bases of the calling agent's version (given by the turn), else of its conversation's version,
    else of the agent's draft."""

    if call.knowledge_base_ids is not None:
        return list(call.knowledge_base_ids)
    if call.conversation_id:
        conversation = (
            Conversation.objects.select_related("agent", "version", "provider").filter(pk=call.conversation_id).first()
        )
        if conversation is not None:
            return list(conversation_config(conversation).knowledge_base_ids)
    agent = Agent.objects.filter(pk=call.agent_id).first() if call.agent_id else None
    return list(agent_config(agent=agent).knowledge_base_ids) if agent is not None else []


def _record(hit: Any) -> dict[str, Any]:
    record = hit.metadata.get("record") if isinstance(hit.metadata, dict) else None
    return record if isinstance(record, dict) else {}


def _query(call: ToolCallContext, query: str, name: str, top_k: int, field: str) -> ToolResult:
    mode = FIELD_MODES.get(field.strip().lower())
    with tenant_scope(call.tenant):
        knowledge_bases = _knowledge_bases(call, name)
        hits = search_many(knowledge_bases, query, top_k=top_k, mode=mode or "hybrid")
    results = []
    for hit in hits:
        source = f"{hit.document_name} #{hit.position + 1}"
        item: dict[str, Any] = {"source": source, "score": round(hit.score, 4), "text": hit.text}
        record = _record(hit)
        if mode is None:  # a record field was asked for
            if field in record:
                item[field] = record[field]
        else:
            item.update({key: value for key, value in record.items() if key not in item})
        results.append(item)
    sources = [{"document": hit.document_name, "document_id": hit.document_id, "position": hit.position,
                "chunk_id": hit.chunk_id, "score": hit.score} for hit in hits]  # fmt: skip
    return ToolResult(
        content=results,
        context={"knowledge_sources": sources, "knowledge_query": {"query": query, "knowledge_bases": [
            kb.name for kb in knowledge_bases]}},
    )  # fmt: skip


@register_tool
class KnowledgeBaseQueryTool(Tool):
    name = "plugin_ai_knowledge_base_query"
    description_en = (
        "Search the knowledge bases (the agent's own, or the one named) for passages relevant to the query. "
        "Answer from the results only and cite each fact's source as given, e.g. [menu.json #2]; say so when "
        "nothing relevant is found."
    )
    description_zh = (
        "在知识库（智能体关联的知识库，或指定名称的知识库）中检索与问题相关的段落。只根据检索结果回答，"
        "并按给出的来源标注引用，例如 [menu.json #2]；没有相关内容时如实说明。"
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for / 要检索的问题"},
            "knowledge_base_name": {"type": "string", "description": "Empty: the agent's knowledge bases / 知识库名称"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "Results (default 5)"},
            "field": {
                "type": "string",
                "description": "embedding (vector search), keyword, hybrid (default), or a record field to return",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        query = arguments["query"].strip()
        if not query:
            raise ToolError(_("The query is empty: say what to look for."))
        return await database_sync_to_async(_query)(
            call,
            query,
            (arguments.get("knowledge_base_name") or "").strip(),
            int(arguments.get("top_k") or 5),
            str(arguments.get("field") or ""),
        )
