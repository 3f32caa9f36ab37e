"""A scripted model API on 127.0.0.1, for running the real agent CLIs under test.

    python3 tests/tools/model_api --script SCRIPT.json --port-file PORT [--log REQUESTS.jsonl]

Serves, on one port, the APIs the agent CLIs speak (each in its own module here):
Anthropic Messages (Claude Code), OpenAI Responses (Codex), OpenAI Chat Completions (aider,
through litellm) and the Gemini API (Gemini CLI), streaming included. Writes the port to
PORT once listening. Every request is appended to REQUESTS.jsonl (method, path, body).

The script (JSON) says what the "model" does; see `Script` in common.py.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import serve  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(prog="model_api")
    p.add_argument("--script", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    serve(a.script, a.port_file, a.log, a.port)


main()
