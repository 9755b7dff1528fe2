"""The PV economics formulas against a hand calculation, the sensitivity table, the city lookup, the report."""

from __future__ import annotations

import re

import pytest
from django.utils import translation

from agents.packs.energy import pv

# Hand case: 100 kW 工商业 in 杭州 (1100 h), self-use 0.8 at 0.85 yuan, the rest fed in at 0.4153 yuan,
# 3500 yuan/kW, O&M 1.5% of capex a year, 8% discount rate, 25 years, no degradation.
#   generation      = 100 × 1100                               = 110,000 kWh a year
#   revenue         = 110,000 × (0.8 × 0.85 + 0.2 × 0.4153)     = 110,000 × 0.76306 = 83,936.6 yuan a year
#   capex           = 100 × 3500                               = 350,000 yuan
#   O&M             = 350,000 × 0.015                          = 5,250 yuan a year
#   net cash flow   = 83,936.6 − 5,250                         = 78,686.6 yuan a year
#   payback         = 350,000 / 78,686.6                       = 4.4480 years (constant flows)
#   annuity factor  = (1 − 1.08^−25) / 0.08                    = 10.674776
#   NPV @ 8%        = 78,686.6 × 10.674776 − 350,000            = 489,961.8 yuan
#   IRR: the r with (1 − (1+r)^−25) / r = 350,000 / 78,686.6 = 4.44801   -> r ≈ 22.34%
HAND = pv.PVInputs(
    capacity_kw=100,
    full_load_hours=1100,
    self_use_ratio=0.8,
    electricity_price=0.85,
    feed_in_price=0.4153,
    cost_per_kw=3500,
    om_ratio=0.015,
    discount_rate=0.08,
    years=25,
    degradation=0,
)
NET = 110_000 * (0.8 * 0.85 + 0.2 * 0.4153) - 350_000 * 0.015


def annuity(rate, years=25):
    return (1 - (1 + rate) ** -years) / rate


def test_the_economics_match_the_hand_calculation():
    result = pv.economics(HAND)
    assert result["generation_year1_kwh"] == pytest.approx(110_000)
    assert result["generation_kwh"] == pytest.approx([110_000] * 25)
    assert result["revenue_year1"] == pytest.approx(83_936.6)
    assert result["capex"] == pytest.approx(350_000)
    assert result["annual_om"] == pytest.approx(5_250)
    assert result["cash_flows"][0] == pytest.approx(-350_000)
    assert result["cash_flows"][1:] == pytest.approx([NET] * 25)
    # Closed forms, so only float rounding separates them: 1e-9 relative.
    assert result["payback_years"] == pytest.approx(350_000 / NET, rel=1e-9)
    assert result["payback_years"] == pytest.approx(4.4480, abs=1e-4)
    assert result["npv"] == pytest.approx(NET * annuity(0.08) - 350_000, rel=1e-9)
    assert result["npv"] == pytest.approx(489_961.8, abs=0.5)
    # Bisection stops when the bracket is under 1e-10; NPV's slope there is about −1.3e6 yuan per unit of rate,
    # so the NPV at the found rate is within a fraction of a yuan of zero, and the annuity check to 1e-6.
    assert result["irr"] == pytest.approx(0.2234, abs=1e-4)
    assert annuity(result["irr"]) == pytest.approx(350_000 / NET, rel=1e-6)
    assert abs(pv.npv(result["irr"], result["cash_flows"])) < 0.01


def test_degradation_lowers_each_year_and_the_returns():
    degraded = pv.economics(pv.PVInputs(**{**pv.economics(HAND)["inputs"], "degradation": 0.005}))
    assert degraded["generation_kwh"][1] == pytest.approx(110_000 * 0.995)
    assert degraded["generation_kwh"][24] == pytest.approx(110_000 * 0.995**24)
    flat = pv.economics(HAND)
    assert degraded["irr"] < flat["irr"] and degraded["npv"] < flat["npv"]
    assert degraded["payback_years"] > flat["payback_years"]


def test_irr_and_payback_when_the_project_never_pays_back():
    assert pv.payback_years([-100, 10, 10]) is None
    assert pv.irr([-100, -10, -10]) is None
    assert pv.irr([-100, 110]) == pytest.approx(0.10, abs=1e-9)
    assert pv.payback_years([-100, 40, 40, 40]) == pytest.approx(2.5)


def test_sensitivity_rows_move_the_right_way():
    rows = pv.sensitivity(HAND)
    assert len(rows) == 12
    assert {row["factor"] for row in rows} == set(pv.SENSITIVITY_FACTORS)
    base = pv.economics(HAND)["irr"]

    def irrs(factor):
        return [row["irr"] for row in rows if row["factor"] == factor]

    price = irrs("electricity_price")  # -20%, -10%, +10%, +20%
    assert price == sorted(price) and price[1] < base < price[2]
    hours = irrs("full_load_hours")
    assert hours == sorted(hours) and hours[1] < base < hours[2]
    cost = irrs("cost_per_kw")
    assert cost == sorted(cost, reverse=True) and cost[1] > base > cost[2]
    paybacks = [row["payback_years"] for row in rows if row["factor"] == "electricity_price"]
    assert paybacks == sorted(paybacks, reverse=True)


@pytest.mark.parametrize(
    ("location", "city", "hours"),
    [
        ("杭州余杭区", "杭州", 1100),
        ("北京市朝阳区", "北京", 1350),
        ("乌鲁木齐", "乌鲁木齐", 1500),
        ("拉萨", "拉萨", 1800),
    ],
)
def test_the_city_lookup_finds_the_city_in_a_location(location, city, hours):
    assert pv.city_full_load_hours(location) == (city, hours)


def test_an_unknown_location_is_none_and_presets_fill_the_inputs():
    assert pv.city_full_load_hours("火星基地") is None
    assert pv.city_full_load_hours("") is None
    commercial = pv.preset_inputs("工商业", 1100)
    assert (commercial.capacity_kw, commercial.self_use_ratio, commercial.cost_per_kw) == (100, 0.8, 3500)
    residential = pv.preset_inputs("户用", 1100)
    assert (residential.capacity_kw, residential.electricity_price, residential.feed_in_price) == (10, 0.538, 0.4153)
    assert pv.preset_inputs("户用", 1100, capacity_kw=20).capacity_kw == 20


def test_the_report_has_the_results_and_the_sensitivity_table():
    report = pv.report_markdown(pv.economics(HAND), pv.sensitivity(HAND), "PV economics: 杭州")
    assert report.startswith("# PV economics: 杭州\n")
    assert "| Factor | Change | IRR | NPV (yuan) | Payback (years) |" in report
    assert "| Electricity price | +20% |" in report and "| Full-load hours | -10% |" in report
    assert "IRR: 22.34%" in report and "Payback: 4.45 years" in report and "NPV @ 8%: 489,962 yuan" in report
    assert report.count("\n|") == 14  # header, rule and 12 rows


def test_the_report_in_chinese_has_no_english_words():
    """Issue 18 item 4: every label of the report is translated (none is hidden from makemessages in an f-string);
    what stays Latin is the finance terms and the units."""
    with translation.override("zh-hans"):
        report = pv.report_markdown(pv.economics(HAND), pv.sensitivity(HAND), "光伏经济性测算：杭州")
    assert "## 测算假设" in report and "## 测算结果" in report and "## 敏感性分析" in report
    assert "| 因素 | 变化 | IRR | NPV (元) | 回收期（年） |" in report
    assert "- 首年收益:" in report and "- 装机容量: 100 kW" in report
    assert set(re.findall(r"(?<![0-9A-Za-z])[A-Za-z]+", report)) <= {"IRR", "NPV", "kW", "kWh", "h"}
