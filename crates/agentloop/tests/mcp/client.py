"""Drive an MCP server with the official Python SDK (PyPI `mcp`), for agentloop's tests.

Usage: client.py TARGET MODE CALLS_JSON
  TARGET  an http:// URL (streamable HTTP) or `stdio:` followed by a JSON list (command + args)
  MODE    `legacy` (the initialize handshake) or a stateless revision such as `2026-07-28`
  CALLS   a JSON list of [tool name, arguments]

Prints one JSON object: the negotiated protocol version, the listed tools and each call's
result, so the Rust test can compare it exactly.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


async def main() -> None:
    target, mode, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if target.startswith("stdio:"):
        command = json.loads(target[len("stdio:"):])
        server = StdioServerParameters(command=command[0], args=command[1:])
    else:
        server = target
    async with Client(server, mode=mode, read_timeout_seconds=20) as client:
        tools = await client.list_tools()
        results = []
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            results.append(
                {
                    "content": [block.model_dump(mode="json", exclude_none=True) for block in result.content],
                    "structuredContent": result.structured_content,
                    "isError": result.is_error,
                }
            )
        print(
            json.dumps(
                {
                    "protocol": client.protocol_version,
                    "server": client.server_info.name if client.server_info else None,
                    "tools": [
                        {
                            "name": tool.name,
                            "inputSchema": tool.input_schema,
                            "outputSchema": tool.output_schema,
                        }
                        for tool in tools.tools
                    ],
                    "results": results,
                }
            )
        )


asyncio.run(main())
