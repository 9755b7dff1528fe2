"""MCP servers a tenant adds, and the tools they list: the platform as an MCP client (docs/mcp.md)."""
