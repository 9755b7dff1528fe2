"""Issue 36: the words of the pages. A key's scopes by their translated names; model tokens are "Token" on the embed
admin (令牌 only for the embed token itself); no stray spaces around Latin words and punctuation in Chinese."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import translation

from api.keys import key_create, scope_names
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


def _scopes_cell(page: str) -> str:
    return re.search(r'<td class="key-scopes">(.*?)</td>', page).group(1)


def test_the_key_table_names_scopes_in_the_readers_language(login, tenant, tenant_admin):
    with tenant_scope(tenant):
        key_create(tenant=tenant, user=tenant_admin, name="All of it", scopes=["write", "mcp", "read", "chat"])
    client = login(tenant_admin, tenant)
    assert _scopes_cell(client.get(reverse("api:keys"), **ZH).content.decode()) == "读取、对话、写入、MCP"
    assert _scopes_cell(client.get(reverse("api:keys"), **EN).content.decode()) == "read, chat, write, mcp"


def test_a_key_without_scopes_is_refused_naming_them_in_the_readers_language(tenant, tenant_admin):
    with tenant_scope(tenant), translation.override("zh-hans"), pytest.raises(ValidationError) as refused:
        key_create(tenant=tenant, user=tenant_admin, name="None", scopes=[])
    assert refused.value.message_dict["scopes"] == ["请至少选择以下一项：读取、对话、写入、MCP。"]
    with translation.override("en"):
        assert scope_names(["mcp", "read"]) == ["read", "mcp"]


def test_the_embed_admin_says_token_for_model_tokens(login, tenant, tenant_admin):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:widget_embedtoken_add"), **ZH).content.decode()
    assert "每日 Token 预算" in page and "可用的 Token 数" in page
    assert "每日令牌预算" not in page and "令牌数" not in page
    listing = client.get(reverse("admin:widget_embedtoken_changelist"), **ZH).content.decode()
    assert "嵌入令牌" in listing  # the embed token keeps its name


def test_the_workflow_pages_list_step_types_without_stray_spaces(login, tenant, tenant_admin):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:workflows:list"), **ZH).content.decode()
    lead = re.sub(r"<[^>]+>", "", re.search(r'<p class="lead">(.*?)</p>', page, re.DOTALL).group(1))
    assert "步骤类型：读取输入" in lead and lead.endswith("输出。"), lead
    assert " ." not in lead and "。 " not in lead
    english = client.get(reverse("agents:workflows:list"), **EN).content.decode()
    lead = re.sub(r"<[^>]+>", "", re.search(r'<p class="lead">(.*?)</p>', english, re.DOTALL).group(1))
    assert "its turn. Step types: Read input" in lead and lead.endswith("Output."), lead


def test_base_url_is_said_without_a_stray_space(login, tenant, tenant_admin):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("api:keys"), **ZH).content.decode()
    assert "OpenAI 兼容接口的基础 URL" in page
    provider = client.get(reverse("admin:llm_modelprovider_add"), **ZH).content.decode()
    for text in (page, provider):
        assert not re.search(r"[\u4e00-\u9fff] 基础 URL", text)


def test_the_admin_says_add_and_change_without_a_space_before_the_model_name(login, tenant, tenant_admin):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:llm_modelprovider_add"), **ZH).content.decode()
    assert "<title>增加模型服务商 |" in page and "增加 模型服务商" not in page
    listing = client.get(reverse("admin:llm_modelprovider_changelist"), **ZH).content.decode()
    assert "选择模型服务商来修改" in listing
