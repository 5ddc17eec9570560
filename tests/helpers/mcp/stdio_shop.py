"""``python -m tests.helpers.mcp.stdio_shop``: the shop MCP server over stdio."""

from tests.helpers.mcp.shop import run_stdio

if __name__ == "__main__":
    run_stdio()
