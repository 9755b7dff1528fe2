"""Photovoltaic (PV) project economics: pure functions, no Django, no numpy (issue 7, item 8).

Model (yearly, end-of-year cash flows, year 0 is the investment):

- generation_t = capacity_kw × full_load_hours × (1 − degradation)^(t−1)          (kWh, t = 1..years)
- revenue_t    = generation_t × (self_use_ratio × electricity_price + (1 − self_use_ratio) × feed_in_price)
- capex        = capacity_kw × cost_per_kw                                         (yuan)
- om           = capex × om_ratio                                                  (yuan a year, constant)
- cash flow    = [−capex, revenue_1 − om, …, revenue_years − om]
- payback      = the fractional year where the cumulative cash flow turns non-negative (None if never)
- NPV(r)       = Σ cash_flow_t / (1 + r)^t;  IRR is the r with NPV(r) = 0, found by bisection.

The full-load hours of CITY_FULL_LOAD_HOURS are indicative values for a first estimate, not measured data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import pgettext

# Indicative annual full-load hours (kWh per kWp a year) of fixed-tilt PV in a few Chinese cities.
CITY_FULL_LOAD_HOURS: dict[str, float] = {
    "乌鲁木齐": 1500,
    "杭州": 1100,
    "北京": 1350,
    "上海": 1150,
    "广州": 1100,
    "成都": 900,
    "拉萨": 1800,
    "西安": 1200,
}

COMMERCIAL = "工商业"
RESIDENTIAL = "户用"

# Presets of the project types: self-use ratio, self-used price, feed-in price (Zhejiang coal benchmark),
# cost per kW, default capacity.
PROJECT_PRESETS: dict[str, dict[str, float]] = {
    COMMERCIAL: {
        "self_use_ratio": 0.8,
        "electricity_price": 0.85,
        "feed_in_price": 0.4153,
        "cost_per_kw": 3500,
        "capacity_kw": 100,
    },
    RESIDENTIAL: {
        "self_use_ratio": 0.5,
        "electricity_price": 0.538,
        "feed_in_price": 0.4153,
        "cost_per_kw": 3200,
        "capacity_kw": 10,
    },
}

SENSITIVITY_FACTORS = ("electricity_price", "cost_per_kw", "full_load_hours")
SENSITIVITY_CHANGES = (-0.2, -0.1, 0.1, 0.2)


@dataclass(frozen=True)
class PVInputs:
    """The inputs of one estimate; prices in yuan/kWh, cost in yuan/kW, ratios as fractions."""

    capacity_kw: float
    full_load_hours: float
    self_use_ratio: float
    electricity_price: float
    feed_in_price: float
    cost_per_kw: float
    om_ratio: float = 0.015
    discount_rate: float = 0.08
    years: int = 25
    degradation: float = 0.005


def city_full_load_hours(location: str) -> tuple[str, float] | None:
    """The (city, hours) whose city name occurs in `location` ("杭州余杭区" -> ("杭州", 1100)); None if unknown."""
    text = (location or "").strip()
    for city, hours in CITY_FULL_LOAD_HOURS.items():
        if city in text:
            return city, hours
    return None


def preset_inputs(
    project_type: str, full_load_hours: float, capacity_kw: float | None = None, **overrides: Any
) -> PVInputs:
    """The inputs of a 工商业 or 户用 project at `full_load_hours`; KeyError for another project type."""
    preset = dict(PROJECT_PRESETS[project_type])
    default_capacity = preset.pop("capacity_kw")
    return PVInputs(
        capacity_kw=float(capacity_kw or default_capacity),
        full_load_hours=float(full_load_hours),
        **preset,
        **overrides,
    )


def generation(inputs: PVInputs) -> list[float]:
    """Generation of years 1..years in kWh, with the annual degradation."""
    first = inputs.capacity_kw * inputs.full_load_hours
    return [first * (1 - inputs.degradation) ** (year - 1) for year in range(1, inputs.years + 1)]


def blended_price(inputs: PVInputs) -> float:
    """Average yuan per generated kWh: self-used share at the electricity price, the rest at the feed-in price."""
    return inputs.self_use_ratio * inputs.electricity_price + (1 - inputs.self_use_ratio) * inputs.feed_in_price


def capex(inputs: PVInputs) -> float:
    return inputs.capacity_kw * inputs.cost_per_kw


def annual_om(inputs: PVInputs) -> float:
    return capex(inputs) * inputs.om_ratio


def cash_flows(inputs: PVInputs) -> list[float]:
    """Year 0 (−capex) then each year's revenue minus O&M."""
    price, om = blended_price(inputs), annual_om(inputs)
    return [-capex(inputs)] + [kwh * price - om for kwh in generation(inputs)]


def npv(rate: float, flows: list[float]) -> float:
    """Net present value of end-of-year `flows` (flows[0] at year 0)."""
    return sum(flow / (1 + rate) ** year for year, flow in enumerate(flows))


def irr(flows: list[float], low: float = -0.99, high: float = 10.0, tolerance: float = 1e-10) -> float | None:
    """The rate where NPV is zero, by bisection on [low, high]; None when NPV does not change sign there."""
    npv_low, npv_high = npv(low, flows), npv(high, flows)
    if npv_low == 0:
        return low
    if npv_low * npv_high > 0:
        return None
    for _step in range(200):
        middle = (low + high) / 2
        npv_middle = npv(middle, flows)
        if abs(high - low) < tolerance or npv_middle == 0:
            return middle
        if (npv_middle > 0) == (npv_low > 0):
            low, npv_low = middle, npv_middle
        else:
            high = middle
    return (low + high) / 2


def payback_years(flows: list[float]) -> float | None:
    """Simple (undiscounted) payback in fractional years; None when the project never pays back."""
    cumulative = flows[0]
    if cumulative >= 0:
        return 0.0
    for year, flow in enumerate(flows[1:], start=1):
        if flow > 0 and cumulative + flow >= 0:
            return year - 1 + (-cumulative) / flow
        cumulative += flow
    return None


def economics(inputs: PVInputs) -> dict[str, Any]:
    """All the results of one estimate, JSON-serialisable."""
    yearly = generation(inputs)
    price, om = blended_price(inputs), annual_om(inputs)
    flows = cash_flows(inputs)
    return {
        "inputs": asdict(inputs),
        "generation_year1_kwh": yearly[0],
        "generation_kwh": yearly,
        "total_generation_kwh": sum(yearly),
        "blended_price": price,
        "revenue_year1": yearly[0] * price,
        "revenue": [kwh * price for kwh in yearly],
        "capex": capex(inputs),
        "annual_om": om,
        "cash_flows": flows,
        "payback_years": payback_years(flows),
        "irr": irr(flows),
        "npv": npv(inputs.discount_rate, flows),
    }


def sensitivity(
    inputs: PVInputs, factors: tuple[str, ...] = SENSITIVITY_FACTORS, changes: tuple[float, ...] = SENSITIVITY_CHANGES
) -> list[dict[str, Any]]:
    """One row per factor and change: {factor, change, irr, npv, payback_years}, the base case excluded."""
    rows = []
    for factor in factors:
        for change in changes:
            varied = replace(inputs, **{factor: getattr(inputs, factor) * (1 + change)})
            result = economics(varied)
            rows.append(
                {
                    "factor": factor,
                    "change": change,
                    "irr": result["irr"],
                    "npv": result["npv"],
                    "payback_years": result["payback_years"],
                }
            )
    return rows


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.2f}%"


def _years(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _yuan(value: float) -> str:
    return f"{value:,.0f}"


def factor_label(factor: str) -> str:
    return {
        "electricity_price": _("Electricity price"),
        "cost_per_kw": _("Cost per kW"),
        "full_load_hours": _("Full-load hours"),
    }.get(factor, factor)


def _item(label: str, value: str) -> str:
    """One "- label: value" line. The labels are translated outside f-strings: xgettext does not look inside them."""
    return f"- {label}: {value}"


def sensitivity_table(rows: list[dict[str, Any]]) -> str:
    """The sensitivity rows as a Markdown table."""
    factor, change = _("Factor"), pgettext("sensitivity table", "Change")
    yuan, payback = _("yuan"), _("Payback (years)")
    lines = [f"| {factor} | {change} | IRR | NPV ({yuan}) | {payback} |", "|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {factor_label(row['factor'])} | {row['change'] * 100:+.0f}% | {_percent(row['irr'])} "
            f"| {_yuan(row['npv'])} | {_years(row['payback_years'])} |"
        )
    return "\n".join(lines)


def summary_markdown(result: dict[str, Any], title: str = "") -> str:
    """The key figures of an economics result as a Markdown list."""
    inputs = result["inputs"]
    yuan, years = _("yuan"), _("years")
    lines = [f"**{title}**", ""] if title else []
    lines += [
        _item(_("Capacity"), f"{inputs['capacity_kw']:g} kW"),
        _item(_("Full-load hours"), f"{inputs['full_load_hours']:g} h"),
        _item(_("Year-1 generation"), f"{_yuan(result['generation_year1_kwh'])} kWh"),
        _item(_("Year-1 revenue"), f"{_yuan(result['revenue_year1'])} {yuan}"),
        _item(_("Investment (capex)"), f"{_yuan(result['capex'])} {yuan}"),
        _item(_("Annual O&M"), f"{_yuan(result['annual_om'])} {yuan}"),
        _item(_("Payback"), f"{_years(result['payback_years'])} {years}"),
        _item("IRR", _percent(result["irr"])),
        _item(f"NPV @ {inputs['discount_rate'] * 100:g}%", f"{_yuan(result['npv'])} {yuan}"),
    ]
    return "\n".join(lines)


def report_markdown(result: dict[str, Any], rows: list[dict[str, Any]], title: str) -> str:
    """A Markdown report: the inputs and results, then the sensitivity table."""
    inputs = result["inputs"]
    per_kwh, years = _("yuan/kWh"), _("years")
    parts = [
        f"# {title}",
        "",
        "## " + _("Assumptions"),
        "",
        _item(_("Self-use ratio"), f"{inputs['self_use_ratio'] * 100:g}%"),
        _item(_("Electricity price (self-used)"), f"{inputs['electricity_price']:g} {per_kwh}"),
        _item(_("Feed-in price"), f"{inputs['feed_in_price']:g} {per_kwh}"),
        _item(_("Cost per kW"), f"{inputs['cost_per_kw']:g} " + _("yuan/kW")),
        _item(_("O&M, share of capex a year"), f"{inputs['om_ratio'] * 100:g}%"),
        _item(_("Discount rate"), f"{inputs['discount_rate'] * 100:g}%"),
        _item(_("Lifetime"), f"{inputs['years']} {years}"),
        _item(_("Annual degradation"), f"{inputs['degradation'] * 100:g}%"),
        "",
        "## " + pgettext("report section", "Results"),
        "",
        summary_markdown(result),
        "",
        "## " + _("Sensitivity"),
        "",
        sensitivity_table(rows),
        "",
        _("Full-load hours are indicative values for a first estimate, not a site survey."),
    ]
    return "\n".join(parts) + "\n"
