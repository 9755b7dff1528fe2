"""The energy pack's tools: `pv_economics`, `pv_sensitivity`, `pv_report` (issue 7, item 8).

They compute with agents.packs.energy.pv and pass the estimate on through ToolResult.context ("pv_estimate": the
inputs as given, so a later step or tool can recompute without the model repeating them). `pv_report` also puts
{"report_markdown", "title"} in the context, for the plan layer to store the report as a file.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.packs.energy import PACK, pv
from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool

CONTEXT_KEY = "pv_estimate"

ESTIMATE_PROPERTIES: dict[str, Any] = {
    "location": {
        "type": "string",
        "minLength": 1,
        "description": "Project location, e.g. 杭州余杭区 / 项目地点（必填）",
    },
    "project_type": {
        "type": "string",
        "enum": [pv.COMMERCIAL, pv.RESIDENTIAL],
        "description": "工商业 (commercial and industrial) or 户用 (residential) / 项目类型（必填）",
    },
    "capacity_kw": {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "Capacity in kW (default 100 for 工商业, 10 for 户用) / 装机容量 kW",
    },
}


def estimate_from(arguments: dict[str, Any], call: ToolCallContext | None = None) -> dict[str, Any]:
    """The estimate's {location, project_type, capacity_kw} from the arguments or, failing that, the tool context."""
    if arguments.get("location") and arguments.get("project_type"):
        return {key: arguments[key] for key in ("location", "project_type", "capacity_kw") if key in arguments}
    earlier = (call.context if call else {}).get(CONTEXT_KEY)
    if isinstance(earlier, dict) and earlier.get("location") and earlier.get("project_type"):
        return dict(earlier)
    raise ToolError(_("The location and the project type (工商业 or 户用) are required: ask the user for them."))


def compute(estimate: dict[str, Any]) -> tuple[pv.PVInputs, dict[str, Any], str]:
    """Inputs, economics result and the city found for an estimate; ToolError for an unknown location or type."""
    found = pv.city_full_load_hours(estimate["location"])
    if found is None:
        raise ToolError(
            _("No full-load hours are known for %(location)s. Known cities: %(cities)s.")
            % {"location": estimate["location"], "cities": "、".join(pv.CITY_FULL_LOAD_HOURS)}
        )
    if estimate["project_type"] not in pv.PROJECT_PRESETS:
        raise ToolError(_("The project type must be 工商业 or 户用."))
    city, hours = found
    inputs = pv.preset_inputs(estimate["project_type"], hours, estimate.get("capacity_kw"))
    return inputs, pv.economics(inputs), city


def title_of(estimate: dict[str, Any]) -> str:
    return _("PV economics: %(location)s, %(type)s") % {
        "location": estimate["location"],
        "type": estimate["project_type"],
    }


@register_tool
class PVEconomicsTool(Tool):
    name = "pv_economics"
    label_en = "PV economics"
    label_zh = "光伏经济性测算"
    pack = PACK
    description_en = (
        "PV (photovoltaic) project economics: generation, revenue, investment, payback, IRR and NPV for a location "
        "and a project type (工商业 or 户用). Location and project type are required: if the user has not said "
        "them, ask; never guess."
    )
    description_zh = (
        "光伏经济性测算：按项目地点和类型（工商业或户用）计算发电量、收益、投资、回收期、IRR 和 NPV。"
        "地点和类型必填：用户没说就先问用户，不要自己决定。"
    )
    parameters = {
        "type": "object",
        "properties": ESTIMATE_PROPERTIES,
        "required": ["location", "project_type"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        estimate = estimate_from(arguments)
        _inputs, result, city = compute(estimate)
        text = pv.summary_markdown(result, title_of(estimate))
        text += "\n\n" + _("Full-load hours of %(city)s (indicative value).") % {"city": city}
        return ToolResult(content=text, context={CONTEXT_KEY: estimate})


@register_tool
class PVSensitivityTool(Tool):
    name = "pv_sensitivity"
    label_en = "PV sensitivity analysis"
    label_zh = "光伏敏感性分析"
    pack = PACK
    description_en = (
        "Sensitivity of a PV estimate: IRR, NPV and payback when the electricity price, the cost per kW and the "
        "full-load hours change by -20%, -10%, +10%, +20%. Uses the previous pv_economics estimate unless a "
        "location and a project type are given."
    )
    description_zh = (
        "光伏敏感性分析：电价、单位造价、满发小时数分别变化 -20%、-10%、+10%、+20% 时的 IRR、NPV 和回收期。"
        "不传地点和类型时沿用上一步光伏经济性测算的结果。"
    )
    parameters = {"type": "object", "properties": ESTIMATE_PROPERTIES, "additionalProperties": False}

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        estimate = estimate_from(arguments, call)
        inputs, result, _city = compute(estimate)
        rows = pv.sensitivity(inputs)
        text = _("Sensitivity (base IRR %(irr)s):") % {"irr": pv._percent(result["irr"])}
        text += "\n\n" + pv.sensitivity_table(rows)
        return ToolResult(content=text, context={CONTEXT_KEY: estimate, "pv_sensitivity": rows})


@register_tool
class PVReportTool(Tool):
    name = "pv_report"
    label_en = "PV report"
    label_zh = "光伏测算报告"
    pack = PACK
    description_en = (
        "Write the Markdown report of a PV estimate (assumptions, results, sensitivity table). Uses the previous "
        "estimate unless a location and a project type are given."
    )
    description_zh = (
        "报告生成：写出光伏测算的 Markdown 报告（假设、结果、敏感性表）。不传地点和类型时沿用上一步的测算。"
    )
    parameters = {"type": "object", "properties": ESTIMATE_PROPERTIES, "additionalProperties": False}

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        estimate = estimate_from(arguments, call)
        inputs, result, _city = compute(estimate)
        title = title_of(estimate)
        report = pv.report_markdown(result, pv.sensitivity(inputs), title)
        return ToolResult(content=report, context={CONTEXT_KEY: estimate, "report_markdown": report, "title": title})
