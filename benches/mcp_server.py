#!/usr/bin/env python3
"""Benchmark: `mvk mcp` through the Python `mcp` SDK: the server's start (initialize), tools/list,
and 20 `plan` calls on a loop file, against `mvk plan --json` run as a process each time (what
an agent shelling out would pay). Not run by CI.

Usage: benches/mcp_server.py [MVK [FILE]]   (default: target/release/mvk, loops/pagination.kdl;
build it first with `cargo build --release`)
"""

import asyncio
import os
import statistics
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MVK = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/mvk")
FILE = sys.argv[2] if len(sys.argv) > 2 else "loops/pagination.kdl"
CALLS = 20


def ms(seconds):
    return f"{1000 * seconds:.1f} ms"


async def server():
    params = StdioServerParameters(command=MVK, args=["mcp"], cwd=ROOT, env=dict(os.environ))
    start = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            initialized = time.perf_counter()
            await session.list_tools()
            listed = time.perf_counter()
            calls = []
            for _ in range(CALLS):
                t = time.perf_counter()
                result = await session.call_tool("plan", {"file": FILE})
                calls.append(time.perf_counter() - t)
                if result.is_error:
                    sys.exit(f"plan failed: {result.content}")
    print(f"mvk mcp: initialize {ms(initialized - start)}, tools/list {ms(listed - initialized)}")
    print(f"  plan over MCP: median {ms(statistics.median(calls))}, min {ms(min(calls))}, max {ms(max(calls))}")


def processes():
    runs = []
    for _ in range(CALLS):
        t = time.perf_counter()
        subprocess.run([MVK, "plan", "--json", FILE], cwd=ROOT, check=True, capture_output=True)
        runs.append(time.perf_counter() - t)
    print(f"  mvk plan --json as a process: median {ms(statistics.median(runs))}, min {ms(min(runs))}, max {ms(max(runs))}")


asyncio.run(server())
processes()
