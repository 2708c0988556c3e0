"""The benchmark's modern (2026-07-28), dual-era MCP server, on the official Python SDK 2.x
(PyPI mcp==2.3.0, `MCPServer`), installed by scripts/interop-setup.sh into target/interop/py2.

    PYTHONPATH=target/interop/py2 python3 bench/modern_server.py http PORT   # http://127.0.0.1:PORT/mcp
    PYTHONPATH=target/interop/py2 python3 bench/modern_server.py stdio       # stdio
"""

import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("mcpulse-bench-modern")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@mcp.tool()
def echo(text: str) -> str:
    """Echoes its input."""
    return text


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run()
