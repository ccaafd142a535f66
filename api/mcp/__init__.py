"""The MCP server: the registry's tools (engine/tools.py) over MCP, ``slotward mcp``.

server.py builds the MCPServer from the registry (listing.py: names,
descriptions, schemas, annotations) and turns answers into tool results
(results.py); a call runs in this process on the store (embedded.py) or against
a slotward server (remote.py); the workflow of a call comes from its arguments
or its MCP session (workflows.py); cli.py adds the subcommand. docs/mcp.md.
"""
