"""Real MCP servers for the tests, built with the official SDK (``mcp.server``): a shop
server served over streamable HTTP on loopback (:class:`McpServerThread`) or over stdio
(``python -m tests.helpers.mcp.stdio_shop``)."""

from tests.helpers.mcp.secure import SecureServerThread
from tests.helpers.mcp.shop import (
    BIG_TEXT_BYTES,
    SHOP_TOOLS,
    McpServerThread,
    ShopServer,
    shop_entry,
    stdio_entry,
)

__all__ = [
    "BIG_TEXT_BYTES",
    "SHOP_TOOLS",
    "McpServerThread",
    "SecureServerThread",
    "ShopServer",
    "shop_entry",
    "stdio_entry",
]
