"""Workflows (A7): seed 1's documents validate and run; each validation error names step, field and line."""

import asyncio

import pytest
from django.urls import reverse
from django.utils import translation

from agents.packs.restaurant.functions import filter_spicy_dishes
from agents.workflows.interpolation import InterpolationError, interpolate
from agents.workflows.runner import run_workflow
from agents.workflows.schema import WorkflowValidationError, parse_workflow
from agents.workflows.templates import template_text
from tenants.scope import tenant_scope
from tests.factories import with_packs
from tests.llm.factories import ModelProviderFactory
from tests.turns import Collector


@pytest.fixture
def tenant(tenant):
    """Seed 1's workflows are the restaurant pack's templates: both tenants have the pack."""
    return with_packs(tenant, "restaurant")


@pytest.fixture
def other_tenant(other_tenant):
    return with_packs(other_tenant, "restaurant")


@pytest.fixture(autouse=True)
def _english():
    with translation.override("en"):
        yield


MENU = template_text("menu_recommendation")
MARKETING = template_text("customer_marketing")


def _errors(text):
    with pytest.raises(WorkflowValidationError) as caught:
        parse_workflow(text)
    return [error.as_dict() for error in caught.value.errors]


def _doc(steps: str) -> str:
    return "version: '1.0'\nname: test\nsteps:\n" + steps


OK_TAIL = """  - id: out
    type: output
    inputs:
      result: '{x}'
"""
INPUT = """  - id: ask
    type: input
    output:
      name: x
"""


def test_both_seed_workflows_validate():
    menu = parse_workflow(MENU)
    assert menu.name == "菜单推荐工作流"
    assert [(s.id, s.type) for s in menu.steps] == [
        ("input_step", "input"),
        ("query_knowledge_base", "plugin"),
        ("custom_logic_filter_spicy", "custom"),
        ("output_step", "output"),
    ]
    assert menu.steps[2].function == "filter_spicy_dishes" and menu.steps[2].line == 28
    marketing = parse_workflow(MARKETING)
    # The seed names two outputs in one mapping (a repeated `name` key): both are kept.
    assert marketing.steps[0].outputs == ["user_tag", "marketing_need"]
    assert marketing.steps[2].inputs == {"topic": "{marketing_need}", "audience": "{user_info[preferences]}"}


def test_the_yaml_parsers_complaint_is_in_the_readers_language():
    """Issue 18 item 4: PyYAML's English does not show inside the Chinese message."""
    with translation.override("zh-hans"):
        (known,) = _errors("version: '1.0'\nname: x: y\nsteps: []\n")
        (other,) = _errors("version: '1.0'\nname: x\nsteps:\n  - id: a\n    type: [input\n")
    assert known["message"] == "YAML 格式错误：这里应是一个值，却出现了冒号（值需要加引号吗？）。"
    assert known["line"] == 2
    assert other["message"] == "YAML 格式错误。" and other["line"] == 6


def test_malformed_yaml_names_line_and_column():
    (error,) = _errors("version: '1.0'\nname: x\nsteps:\n  - id: a\n    type: [input\n")
    assert error["line"] == 6 and error["column"] is not None
    assert error["message"].startswith("The YAML is malformed")


def test_missing_required_field_names_step_field_and_line():
    (error,) = _errors(_doc(INPUT + "  - id: p\n    type: plugin\n    outputs:\n      name: y\n" + OK_TAIL))
    assert error == {"step": "p", "field": "plugin", "line": 8, "column": None,
                     "message": "This field is required."}  # fmt: skip
    (error,) = _errors("version: '1.0'\nsteps:\n" + INPUT + OK_TAIL)
    assert error["field"] == "name" and error["line"] == 1


def test_unknown_step_type():
    (error,) = _errors(_doc(INPUT + "  - id: weird\n    type: shell\n" + OK_TAIL))
    assert (error["step"], error["field"], error["line"]) == ("weird", "type", 9)
    assert "Unknown step type “shell”" in error["message"]


def test_unknown_plugin_and_unregistered_function_are_refused():
    steps = (
        INPUT
        + "  - id: p\n    type: plugin\n    plugin: plugin_does_not_exist\n    outputs:\n      name: y\n"
        + "  - id: c\n    type: custom\n    function: os.system\n    inputs:\n      cmd: '{x}'\n"
        + "    outputs:\n      name: z\n"
        + OK_TAIL
    )
    plugin, function = _errors(_doc(steps))
    assert (plugin["step"], plugin["field"], plugin["line"]) == ("p", "plugin", 10)
    assert "Unknown plugin “plugin_does_not_exist”" in plugin["message"]
    assert (function["step"], function["field"], function["line"]) == ("c", "function", 15)
    assert "registered Python functions only" in function["message"]


def test_reference_to_a_variable_no_earlier_step_produces():
    steps = INPUT + "  - id: out\n    type: output\n    inputs:\n      result: 'Hi {later[key]} and {x}'\n"
    (error,) = _errors(_doc(steps))
    assert (error["step"], error["field"], error["line"]) == ("out", "inputs.result", 11)
    assert "“{later}” is not produced by any earlier step" in error["message"]


def test_duplicate_step_id():
    (error,) = _errors(_doc(INPUT + INPUT.replace("name: x", "name: x2") + OK_TAIL))
    assert (error["step"], error["field"], error["line"]) == ("ask", "id", 8)
    assert "already has the id" in error["message"]


def test_interpolation_of_names_and_keys():
    variables = {"user": {"mobile": "138", "tags": ["a", "b"]}, "n": 3, "dishes": ["麻婆豆腐"]}
    assert interpolate("{user[mobile]}", variables) == "138"
    assert interpolate("{dishes}", variables) == ["麻婆豆腐"]  # one whole reference keeps its type
    assert interpolate("call {user[mobile]} x{n} {user[tags][1]}", variables) == "call 138 x3 b"
    assert interpolate({"a": ["{n}"]}, variables) == {"a": [3]}
    with pytest.raises(InterpolationError, match="has no key “email”"):
        interpolate("{user[email]}", variables)


def test_filter_spicy_dishes():
    menu = [{"name": "麻婆豆腐", "taste": "麻辣"}, {"name": "清蒸鱼", "taste": "清淡"}, "辣子鸡", "蛋炒饭"]
    assert filter_spicy_dishes(menu) == ["麻婆豆腐", "辣子鸡"]
    assert filter_spicy_dishes("辣子鸡，清炒时蔬") == ["辣子鸡"]


@pytest.mark.django_db(transaction=True)
def test_menu_workflow_runs_end_to_end(tenant):
    from tests.agents.test_knowledge_plugin import _menu_base

    _menu_base(tenant)  # the seed's knowledge base "huangmenji_menu": three 黄焖鸡 dishes, one of them spicy

    async def go():
        with tenant_scope(tenant):
            return await run_workflow(parse_workflow(MENU), tenant=tenant, message="我喜欢吃辣，有什么菜品推荐")

    result = asyncio.run(go())
    assert result.status == "completed", result.error
    assert [entry["step"] for entry in result.log] == [s.id for s in parse_workflow(MENU).steps]
    kb = result.log[1]
    assert kb["inputs"] == {"query": "我喜欢吃辣，有什么菜品推荐", "knowledge_base_name": "huangmenji_menu",
                            "field": "embedding"}  # fmt: skip
    found = kb["outputs"]["dish_recommendations"]
    assert found and result.context["knowledge_query"]["knowledge_bases"] == ["huangmenji_menu"]
    # The custom step keeps the spicy dishes of what the knowledge base returned.
    assert result.result == filter_spicy_dishes(found) and "辣味黄焖鸡" in str(result.result)
    assert all(entry["ms"] >= 0 and entry["error"] == "" for entry in result.log)


@pytest.mark.django_db
def test_marketing_workflow_runs_end_to_end(tenant):
    result = asyncio.run(
        run_workflow(parse_workflow(MARKETING), tenant=tenant, message="tag: 潜在客户\nmarketing_need: 推广新产品")
    )
    assert result.status == "completed", result.error
    assert result.variables["user_tag"] == "潜在客户" and result.variables["marketing_need"] == "推广新产品"
    sms = result.log[3]
    assert sms["inputs"]["mobile"] == "13800000001" and sms["inputs"]["subject"] == "最新产品推荐"
    assert "推广新产品" in sms["inputs"]["body"] and "喜欢辣味" in sms["inputs"]["body"]
    assert result.result is True and result.context["sms_outbox"][0]["simulated"] is True


@pytest.mark.django_db
def test_a_missing_input_pauses_the_run_with_a_question_and_what_is_known(tenant):
    result = asyncio.run(run_workflow(parse_workflow(MARKETING), tenant=tenant, message="tag: vip"))
    assert result.status == "interrupted" and len(result.log) == 1 and result.error == ""
    assert result.text == "Please give marketing_need, each on its own line as “name: value”."
    assert result.pause.step == "input_step" and result.pause.missing == ["marketing_need"]
    assert result.pause.variables == {"user_tag": "vip"} and result.log[0]["asked"] == result.text
    resumed = asyncio.run(
        run_workflow(parse_workflow(MARKETING), tenant=tenant, message="marketing_need: 新品", resume=result.pause)
    )
    assert resumed.status == "completed", resumed.error
    assert resumed.variables["user_tag"] == "vip" and resumed.variables["marketing_need"] == "新品"


ASK = """  - id: city
    type: ask
    question: 'Which city, for {answer}?'
    outputs:
      name: city
"""

BAD_ASKS = """  - id: q
    type: ask
    max_asks: 0
    outputs:
      name: y
  - id: r
    type: ask
    question: 'For {nope}?'
    extract:
      z: {regex: '(unclosed'}
      ghost: {regex: 'a'}
      w: {choices: 3}
      v: 'text'
    outputs:
      name: z
      name: w
      name: v
"""


def test_ask_steps_are_validated_with_step_field_and_line():
    errors = {(e["step"], e["field"]): e for e in _errors(_doc(INPUT + BAD_ASKS + OK_TAIL))}
    assert set(errors) == {
        ("q", "question"), ("q", "max_asks"), ("r", "question"), ("r", "extract.z.regex"), ("r", "extract.ghost"),
        ("r", "extract.w.choices"), ("r", "extract.v"),
    }  # fmt: skip
    assert "This field is required" in errors[("q", "question")]["message"] and errors[("q", "question")]["line"] == 8
    assert errors[("q", "max_asks")]["line"] == 10
    assert "“{nope}” is not produced" in errors[("r", "question")]["message"]
    assert errors[("r", "extract.z.regex")]["line"] == 17
    assert "Invalid regular expression “(unclosed”" in errors[("r", "extract.z.regex")]["message"]
    assert "not a variable of this step" in errors[("r", "extract.ghost")]["message"]
    assert errors[("r", "extract.ghost")]["line"] == 18


SIZE_AND_COLOUR = r"""  - id: more
    type: ask
    question: 'Size and colour?'
    extract:
      size: {regex: ['(?P<value>\d+) ?cm', 'size (\w+)']}
      colour: {choices: {red: [rouge, 红], blue: [bleu]}}
    outputs:
      name: size
      name: colour
  - id: out
    type: output
    inputs:
      result: '{x}: {size} {colour}'
"""


@pytest.mark.django_db
def test_extraction_rules_fill_variables_from_the_answer(tenant):
    document = parse_workflow(_doc(INPUT + SIZE_AND_COLOUR))
    first = asyncio.run(run_workflow(document, tenant=tenant, message="a box"))
    assert first.status == "interrupted" and first.text == "Size and colour?"
    done = asyncio.run(run_workflow(document, tenant=tenant, message="40 cm, 红色的", resume=first.pause))
    assert done.status == "completed" and done.text == "a box: 40 red"
    other = asyncio.run(run_workflow(document, tenant=tenant, message="size XL, bleu", resume=first.pause))
    assert other.text == "a box: XL blue"


THINK = """  - id: think
    type: llm
    prompt: 'Weather in {x}?'
    outputs:
      name: answer
"""


@pytest.mark.django_db(transaction=True)
def test_an_ask_step_resumes_without_running_the_earlier_steps_again(tenant, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Sunny"}})
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
    out = "  - id: out\n    type: output\n    inputs:\n      reply: '{answer} in {city}.'\n"
    document = parse_workflow(_doc(INPUT + THINK + ASK + out))

    async def go(message, resume=None):
        with tenant_scope(tenant):
            return await run_workflow(document, tenant=tenant, message=message, resume=resume)

    first = asyncio.run(go("spring"))
    assert first.status == "interrupted" and first.text == "Which city, for Sunny?"
    assert first.pause.variables == {"x": "spring", "answer": "Sunny"}
    done = asyncio.run(go("Chengdu", first.pause))
    assert done.status == "completed" and done.text == "Sunny in Chengdu."
    assert [entry["step"] for entry in done.log] == ["city", "out"]
    assert len(scripted_llm.requests()) == 1  # the llm step ran once, before the question


@pytest.mark.django_db(transaction=True)
def test_llm_step_sends_the_interpolated_prompt(tenant, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Sunny"}})
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
    text = _doc(
        INPUT
        + "  - id: think\n    type: llm\n    prompt: 'Weather in {x}?'\n    outputs:\n      name: answer\n"
        + "  - id: out\n    type: output\n    inputs:\n      reply: 'It is {answer}.'\n"
    )

    async def go():
        with tenant_scope(tenant):
            return await run_workflow(parse_workflow(text), tenant=tenant, message="Chengdu")

    result = asyncio.run(go())
    assert result.status == "completed", result.error
    assert result.text == "It is Sunny."
    (request,) = scripted_llm.requests()
    assert request["body"]["messages"] == [{"role": "user", "content": "Weather in Chengdu?"}]


# --- stored workflows, pages, the workflow agent turn ------------------------------------------------------------

EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


def _stored(tenant, text=MENU, agent=None):
    from agents.workflows.services import workflow_save

    with tenant_scope(tenant):
        return workflow_save(tenant=tenant, yaml_text=text, agent=agent)


@pytest.fixture
def workflows(tenant, other_tenant):
    return {"mine": _stored(tenant), "theirs": _stored(other_tenant, MARKETING)}


@pytest.mark.django_db
def test_editors_save_valid_yaml_and_invalid_yaml_is_refused_with_the_text_kept(login, tenant, tenant_admin):
    from agents.models import Workflow

    client = login(tenant_admin, tenant)
    broken = MENU.replace("type: 'custom'", "type: 'shell'")
    response = client.post(reverse("agents:workflows:create"), {"yaml": broken, "agent": ""}, **EN)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Unknown step type “shell”" in page and "line 29" in page and "custom_logic_filter_spicy" in page
    assert "type: &#x27;shell&#x27;" in page  # the text stays in the editor
    response = client.post(reverse("agents:workflows:create"), {"yaml": MENU, "agent": ""}, **EN)
    assert response.status_code == 302
    with tenant_scope(tenant):
        workflow = Workflow.objects.get()
    assert workflow.name == "菜单推荐工作流" and workflow.yaml == MENU
    assert client.get(reverse("agents:workflows:create") + "?template=customer_marketing").status_code == 200


@pytest.mark.django_db
def test_members_read_but_do_not_edit(login, tenant, member, workflows):
    client = login(member, tenant)
    mine = workflows["mine"]
    assert client.get(reverse("agents:workflows:list")).status_code == 200
    response = client.get(reverse("agents:workflows:edit", args=[mine.pk]))
    assert response.status_code == 200 and b"workflow-form" not in response.content
    assert client.post(reverse("agents:workflows:edit", args=[mine.pk]), {"yaml": MENU}).status_code == 403
    assert client.get(reverse("agents:workflows:create")).status_code == 403


@pytest.mark.django_db
def test_another_tenants_workflow_is_a_404_on_every_page(login, tenant, tenant_admin, workflows):
    from agents.models import WorkflowRun

    client = login(tenant_admin, tenant)
    theirs = workflows["theirs"]
    for name in ("edit", "runs", "export"):
        assert client.get(reverse(f"agents:workflows:{name}", args=[theirs.pk])).status_code == 404, name
    assert client.post(reverse("agents:workflows:edit", args=[theirs.pk]), {"yaml": MENU}).status_code == 404
    with tenant_scope(theirs.tenant):
        run = WorkflowRun.objects.create(tenant=theirs.tenant, workflow=theirs, status="completed")
    assert client.get(reverse("agents:workflows:run", args=[theirs.pk, run.pk])).status_code == 404
    mine = workflows["mine"]
    assert client.get(reverse("agents:workflows:run", args=[mine.pk, run.pk])).status_code == 404
    listing = client.get(reverse("agents:workflows:list")).content.decode()
    assert f'data-workflow="{mine.pk}"' in listing and f'data-workflow="{theirs.pk}"' not in listing


@pytest.mark.django_db
def test_export_download_and_import_upload(login, tenant, tenant_admin, workflows):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client = login(tenant_admin, tenant)
    response = client.get(reverse("agents:workflows:export", args=[workflows["mine"].pk]))
    assert response.status_code == 200 and response.content.decode() == MENU
    assert "attachment" in response["Content-Disposition"]
    upload = SimpleUploadedFile("m.yaml", MARKETING.encode())
    response = client.post(reverse("agents:workflows:import"), {"file": upload})
    assert response.status_code == 302
    bad = SimpleUploadedFile("b.yaml", MARKETING.replace("{user_info[mobile]}", "{nobody}").encode())
    response = client.post(reverse("agents:workflows:import"), {"file": bad}, **EN)
    assert response.status_code == 400 and "“{nobody}” is not produced" in response.content.decode()


@pytest.mark.django_db
def test_admin_validates_the_yaml_and_hides_other_tenants(login, tenant, tenant_admin, workflows):
    client = login(tenant_admin, tenant)
    changelist = client.get("/admin/agents/workflow/")
    assert changelist.status_code == 200
    assert workflows["mine"].name in changelist.content.decode()
    assert workflows["theirs"].name not in changelist.content.decode()
    theirs = client.get(f"/admin/agents/workflow/{workflows['theirs'].pk}/change/")
    assert theirs.status_code in (302, 404)
    broken = MENU.replace("plugin: 'plugin_ai_knowledge_base_query'", "plugin: 'nope'")
    response = client.post(
        f"/admin/agents/workflow/{workflows['mine'].pk}/change/",
        {"name": "菜单推荐工作流", "description": "", "agent": "", "yaml": broken},
        **EN,
    )
    assert response.status_code == 200 and "Unknown plugin “nope”" in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_workflow_agent_turn_streams_step_frames_and_stores_reply_and_run(tenant, member, scripted_llm):
    from agents.models import WorkflowRun
    from agents.runtime import run_turn
    from agents.services import agent_create, conversation_start
    from memory.models import Message
    from memory.services import message_add

    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="营销助理", kind="workflow")
    _stored(tenant, MARKETING, agent=agent)
    with tenant_scope(tenant):
        conversation = conversation_start(agent=agent, user=member)
        user = message_add(conversation=conversation, role="user", content="tag: vip\nmarketing_need: 新品",
                           client_id="c1")  # fmt: skip
    sink = Collector()

    async def go():
        with tenant_scope(tenant):
            return await run_turn(conversation=conversation, user_message=user, sink=sink)

    result = asyncio.run(go())
    reply = result.message
    assert result.status == "completed"
    tools = [(f["name"], f["status"]) for f in sink.frames if f["type"] == "tool"]
    assert tools[:2] == [("input_step", "started"), ("input_step", "completed")]
    assert tools[-1] == ("output_step", "completed") and len(tools) == 10
    assert [f["type"] for f in sink.frames][-2:] == ["step", "done"]
    text = "".join(f["content"] for f in sink.frames if f["type"] == "delta")
    assert text == "true" and reply.content == "true"
    step = sink.frames[-2]["agentChatResponse"]
    assert step["intent"] == "workflow" and step["data"]["result"] is True
    with tenant_scope(tenant):
        run = WorkflowRun.objects.get()
        stored = list(Message.objects.filter(conversation=conversation).values_list("role", "content"))
    assert run.status == "completed" and run.conversation_id == conversation.pk and len(run.log) == 5
    assert run.log[1]["outputs"]["user_info"]["mobile"] == "13800000003" and step["data"]["run_id"] == run.pk
    assert stored[-1] == ("assistant", "true")
    assert scripted_llm.requests() == []  # no llm step: the model is not called


def _workflow_conversation(tenant, member, text=MARKETING):
    from agents.services import agent_create, conversation_start

    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="营销助理", kind="workflow")
    _stored(tenant, text, agent=agent)
    with tenant_scope(tenant):
        return conversation_start(agent=agent, user=member)


def _turn(tenant, conversation, text):
    from agents.runtime import run_turn
    from memory.services import message_add

    with tenant_scope(tenant):
        user = message_add(conversation=conversation, role="user", content=text)
    sink = Collector()

    async def go():
        with tenant_scope(tenant), translation.override("en"):
            return await run_turn(conversation=conversation, user_message=user, sink=sink)

    sink.result = asyncio.run(go())
    return sink.result.message, sink


def _runs(tenant):
    from agents.models import WorkflowRun

    with tenant_scope(tenant):
        return list(WorkflowRun.objects.order_by("id"))


@pytest.mark.django_db(transaction=True)
def test_a_workflow_agent_asks_and_the_next_message_resumes_the_same_run(tenant, member):
    conversation = _workflow_conversation(tenant, member)
    reply, sink = _turn(tenant, conversation, "tag: vip")
    assert reply.content == "Please give marketing_need, each on its own line as “name: value”."
    assert [(f["name"], f["status"]) for f in sink.frames if f["type"] == "tool"] == [
        ("input_step", "started"), ("input_step", "interrupted")
    ]  # fmt: skip
    step = sink.of("step")[-1]
    assert step["status"] == "interrupted" and step["agentChatResponse"]["data"]["missing"] == ["marketing_need"]
    (run,) = _runs(tenant)
    assert run.status == "interrupted" and run.outputs["pause"]["variables"] == {"user_tag": "vip"}
    assert run.conversation_id == conversation.pk

    reply, sink = _turn(tenant, conversation, "marketing_need: 新品")
    assert reply.content == "true" and sink.of("step")[-1]["status"] == "completed"
    (run,) = _runs(tenant)  # the same run, gone on from its input step
    assert run.status == "completed" and run.inputs["answers"] == ["marketing_need: 新品"]
    assert [entry["step"] for entry in run.log] == [
        "input_step", "input_step", "get_user_info", "generate_marketing_article", "send_sms", "output_step"
    ]  # fmt: skip
    assert run.log[3]["inputs"]["topic"] == "新品"


ASK_ONCE = MARKETING.replace("    type: 'input'\n", "    type: 'input'\n    max_asks: 1\n", 1)


@pytest.mark.django_db(transaction=True)
def test_a_failing_step_is_the_reply_and_the_run_is_logged_failed(tenant, member):
    conversation = _workflow_conversation(tenant, member, ASK_ONCE)
    _turn(tenant, conversation, "hello")
    reply, sink = _turn(tenant, conversation, "still nothing")
    assert "Missing input: user_tag, marketing_need (asked once without an answer)" in reply.content
    assert [(f["name"], f["status"]) for f in sink.frames if f["type"] == "tool"] == [
        ("input_step", "started"),
        ("input_step", "failed"),
    ]
    assert sink.frames[-2]["status"] == "failed" and sink.frames[-1]["type"] == "done"
    (run,) = _runs(tenant)
    assert run.status == "failed" and run.log[-1]["error"].startswith("Missing input")


@pytest.mark.django_db
def test_run_log_pages_and_admin_keep_tenants_apart(login, tenant, tenant_admin, member, workflows):
    from agents.models import WorkflowRun

    with tenant_scope(tenant):
        mine = WorkflowRun.objects.create(tenant=tenant, workflow=workflows["mine"], status="completed",
                                          log=[{"step": "input_step", "type": "input", "inputs": {}, "outputs": {},
                                                "ms": 1.5, "error": ""}])  # fmt: skip
    theirs_workflow = workflows["theirs"]
    with tenant_scope(theirs_workflow.tenant):
        theirs = WorkflowRun.objects.create(tenant=theirs_workflow.tenant, workflow=theirs_workflow, status="failed")
    # A run outside any conversation is an administrator's to read (tests/test_member_privacy.py: members read
    # their own runs).
    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:workflows:run", args=[workflows["mine"].pk, mine.pk]))
    assert page.status_code == 200 and "input_step" in page.content.decode()
    assert (
        f'data-run="{mine.pk}"'
        in client.get(reverse("agents:workflows:runs", args=[workflows["mine"].pk])).content.decode()
    )
    admin = login(tenant_admin, tenant)
    assert admin.get(f"/admin/agents/workflowrun/{mine.pk}/change/").status_code == 200
    assert admin.get(f"/admin/agents/workflowrun/{theirs.pk}/change/").status_code in (302, 404)


@pytest.mark.django_db
def test_the_home_page_has_a_workflows_card(login, tenant, member):
    body = login(member, tenant).get("/").content.decode()
    assert 'data-card="workflows"' in body and reverse("agents:workflows:list") in body


@pytest.mark.django_db(transaction=True)
def test_a_published_version_freezes_the_workflow_document(tenant, member, scripted_llm):
    from agents.models import Workflow
    from agents.runtime import run_turn
    from agents.services import agent_create, agent_publish, conversation_start
    from memory.services import message_add

    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="营销助理", kind="workflow")
    _stored(tenant, MARKETING, agent=agent)
    with tenant_scope(tenant):
        version = agent_publish(agent=agent, user=None)
        assert version.snapshot["workflow_yaml"] == MARKETING
        conversation = conversation_start(agent=agent, user=member)
        # The workflow is changed after the conversation started (here: into a document that cannot even parse).
        Workflow.objects.filter(agent=agent).update(yaml="steps: [unclosed")
        user = message_add(conversation=conversation, role="user", content="tag: vip\nmarketing_need: 新品")

    async def go():
        with tenant_scope(tenant):
            return await run_turn(conversation=conversation, user_message=user, sink=Collector())

    assert asyncio.run(go()).message.content == "true"  # the version's document ran
