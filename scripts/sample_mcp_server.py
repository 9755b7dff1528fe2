#!/usr/bin/env python3
"""A small MCP server to try the platform's MCP tools with, offline: two tools over streamable HTTP on 127.0.0.1.

    .venv/bin/python scripts/sample_mcp_server.py              # http://127.0.0.1:8765/mcp
    .venv/bin/python scripts/sample_mcp_server.py --port 9000

- `weather`: the weather of a city, from a small table built in (sample data, not a forecast);
- `convert_units`: a value from one unit to another (km / miles, kg / pounds, °C / °F).

Add it in the platform under Admin › MCP servers (URL `http://127.0.0.1:8765/mcp`; a server on this machine needs
MCP_ALLOW_PRIVATE_URLS=1 or the operator's "private network allowed"), enable its tools and give them to an agent:
README.md, "Your own tools: the sample MCP server". Descriptions are in Chinese and English, so a model, the offline
demo model too, finds the tool whichever language the user writes in. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Annotated, Literal

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

DEFAULT_PORT = 8765


@dataclass(frozen=True)
class Weather:
    """One city's sample weather, in both languages."""

    name_zh: str
    name_en: str
    sky_zh: str
    sky_en: str
    low_c: int
    high_c: int
    humidity: int

    def text(self) -> str:
        return (
            f"{self.name_zh} / {self.name_en}：{self.sky_zh} / {self.sky_en}，{self.low_c}～{self.high_c} °C，"
            f"湿度 / humidity {self.humidity}%（示例数据 / sample data）"
        )


WEATHER = {
    "beijing": Weather("北京", "Beijing", "晴", "sunny", -2, 8, 30),
    "shanghai": Weather("上海", "Shanghai", "多云", "cloudy", 9, 15, 68),
    "guangzhou": Weather("广州", "Guangzhou", "阵雨", "showers", 18, 25, 82),
    "hangzhou": Weather("杭州", "Hangzhou", "小雨", "light rain", 8, 13, 85),
    "chengdu": Weather("成都", "Chengdu", "阴", "overcast", 7, 12, 78),
    "london": Weather("伦敦", "London", "雾", "fog", 4, 9, 90),
}
City = Literal["beijing", "shanghai", "guangzhou", "hangzhou", "chengdu", "london"]
CITY_HELP = "城市 / city: " + ", ".join(f"{key}（{city.name_zh}, {city.name_en}）" for key, city in WEATHER.items())

# Each unit: (its kind, the factor to the kind's base unit); temperatures are converted by formula.
UNITS = {"km": ("length", 1.0), "mi": ("length", 1.609344), "kg": ("weight", 1.0), "lb": ("weight", 0.45359237),
         "c": ("temperature", 1.0), "f": ("temperature", 1.0)}  # fmt: skip
Unit = Literal["km", "mi", "kg", "lb", "c", "f"]
UNIT_HELP = (
    "单位 / unit: km（公里, 千米, kilometre, kilometres, kilometer, kilometers）, mi（英里, mile, miles）, "
    "kg（公斤, 千克, kilogram, kilograms）, lb（磅, pound, pounds, lbs）, c（摄氏度, 摄氏, °C, Celsius）, "
    "f（华氏度, 华氏, °F, Fahrenheit）"
)


def weather(city: Annotated[City, Field(description=CITY_HELP)]) -> str:
    """查询城市的天气（内置示例数据，离线）。Look up the weather of a city (built-in sample data, offline)."""
    return WEATHER[city].text()


def convert_units(
    value: Annotated[float, Field(description="要换算的数值 / the value to convert")],
    from_unit: Annotated[Unit, Field(description=f"原单位；{UNIT_HELP}")],
    to_unit: Annotated[Unit, Field(description=f"目标单位；{UNIT_HELP}")],
) -> str:
    """单位换算：长度（公里、英里）、重量（公斤、磅）、温度（摄氏度、华氏度）。
    Convert a value between units of length, weight or temperature."""
    (kind, factor), (to_kind, to_factor) = UNITS[from_unit], UNITS[to_unit]
    if kind != to_kind:
        raise ToolError(f"无法把 {from_unit} 换算成 {to_unit} / cannot convert {from_unit} to {to_unit}")
    if kind == "temperature":
        celsius = value if from_unit == "c" else (value - 32) * 5 / 9
        result = celsius if to_unit == "c" else celsius * 9 / 5 + 32
    else:
        result = value * factor / to_factor
    shown = {"c": "°C", "f": "°F"}
    return f"{value:g} {shown.get(from_unit, from_unit)} = {round(result, 2):g} {shown.get(to_unit, to_unit)}"


def build_server() -> MCPServer:
    """The sample MCP server with its two tools."""
    server = MCPServer("sample-tools", instructions="示例工具 / Sample tools: weather, convert_units (offline).")
    server.tool()(weather)
    server.tool()(convert_units)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description="A sample MCP server (streamable HTTP on 127.0.0.1), offline.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT})")
    port = parser.parse_args().port
    app = build_server().streamable_http_app(stateless_http=True, json_response=True)
    print(f"Sample MCP server / 示例 MCP 服务器: http://127.0.0.1:{port}/mcp  (Ctrl-C stops it)", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
