"""The API documentation in the reader's language: the schema's title, description and tag descriptions follow the
request's language (config.openapi), as Swagger UI and ReDoc fetch it."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "language, title, description, agents",
    [
        ("zh-hans", "智能体平台 API", "一个租户的智能体与会话", "智能体：创建、修改、发布、导出和导入。"),
        ("en", "Agent platform API", "Agents and conversations of one tenant", "Agents: create, change, publish"),
    ],
)
def test_the_schema_speaks_the_request_language(client, language, title, description, agents):
    response = client.get(reverse("api:schema"), {"format": "json"}, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    schema = response.json()
    assert schema["info"]["title"] == title and schema["info"]["description"].startswith(description)
    tags = {tag["name"]: tag.get("description", "") for tag in schema["tags"]}
    assert tags["agents"].startswith(agents)
    # Every tag an operation uses is described, and the names stay the URL segments.
    used = {tag for item in schema["paths"].values() for op in item.values() if isinstance(op, dict)
            for tag in op.get("tags", [])}  # fmt: skip
    assert used == set(tags) and all(tags.values()) and "knowledge-bases" in tags
