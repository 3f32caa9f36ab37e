#!/usr/bin/env python3
"""Drives `mvk mcp` with the Python `mcp` SDK from PyPI (a client nobody here wrote).

Usage: client.py MVK DIR [SERVER_ARG...] < steps.json
Starts `MVK mcp` (or `MVK SERVER_ARG...`) in DIR over stdio, initializes, then runs each step in order and prints one
JSON document: the server's name and, per step, what came back. A step is
  {"list": true}                                   the tools, with their schemas
  {"tool": NAME, "arguments": {...}}               a call: structured content, or the error
  {"tool": "status", "arguments": {...}, "until": ["paused", "finished"], "seconds": 60}
                                                   the call again until the result's `state` is
                                                   one of those (or the time is up)
  {"shell": "COMMAND"}                             `sh -c COMMAND` here, between calls, its exit
                                                   code back (`{"code": N}`)
In arguments, the string "@RUN" stands for the run the last `apply` named.
The test that runs it (tests/integration/mcp.rs) asserts on the document.
"""

import asyncio
import json
import os
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


async def call(session, step):
    try:
        result = await session.call_tool(step["tool"], step.get("arguments", {}))
    except MCPError as e:
        return {"error": {"code": e.code, "message": e.message, "data": e.data}}
    return {
        "structured": result.structured_content,
        "is_error": bool(result.is_error),
        "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
    }


async def main():
    mvk, cwd = sys.argv[1], sys.argv[2]
    server_args = sys.argv[3:] or ["mcp"]
    steps = json.load(sys.stdin)
    params = StdioServerParameters(command=mvk, args=server_args, cwd=cwd, env=dict(os.environ))
    out = {"steps": []}
    last_run = None
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            out["instructions"] = init.instructions
            for step in steps:
                if "shell" in step:
                    done = subprocess.run(["sh", "-c", step["shell"]])
                    out["steps"].append({"code": done.returncode})
                    continue
                if step.get("list"):
                    tools = await session.list_tools()
                    out["steps"].append(
                        {
                            "tools": [
                                {
                                    "name": t.name,
                                    "description": t.description,
                                    "input_schema": t.input_schema,
                                    "output_schema": t.output_schema,
                                    "annotations": t.annotations.model_dump(mode="json", exclude_none=True)
                                    if t.annotations
                                    else None,
                                }
                                for t in tools.tools
                            ]
                        }
                    )
                    continue
                args = {
                    k: (last_run if v == "@RUN" else v) for k, v in step.get("arguments", {}).items()
                }
                step = dict(step, arguments=args)
                got = await call(session, step)
                if step["tool"] == "apply" and got.get("structured"):
                    last_run = got["structured"]["run"]
                until = step.get("until")
                deadline = time.monotonic() + step.get("seconds", 0)
                while (
                    until
                    and (got.get("structured") or {}).get("state") not in until
                    and time.monotonic() < deadline
                ):
                    await asyncio.sleep(0.2)
                    got = await call(session, step)
                out["steps"].append(got)
    print(json.dumps(out))


asyncio.run(main())
