"""Agents: their configuration, published versions and (later) the runtime, tools and workflows."""
