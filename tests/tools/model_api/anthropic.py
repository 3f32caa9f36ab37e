"""The Anthropic Messages API, as Claude Code speaks it.

    POST /v1/messages                 the model: streaming (SSE) when the body says "stream": true
    POST /v1/messages/count_tokens    {"input_tokens": N}
    GET  /v1/models[/ID]              a short model list / one model
    HEAD, GET / and /api/hello        200, for connectivity probes (Claude Code sends HEAD /api/hello)

A main-loop request is one that offers tools. Its step is the number of assistant turns in
`messages` that hold a tool_use, not counting the turns this module adds by itself (a Read
of a file before a Write, see below). Requests that offer no tools (titles, summaries, quota
probes) get a short text ("OK", 0 input and 1 output token, so the script's usage adds up per
step) and neither take a step nor a 429. Claude Code 2.1.332 in print mode makes no such side
request; it sends only the main loop (and HEAD /api/hello unless nonessential traffic is off).

Steps become Claude Code's own tools, found by name in the request's `tools`:
  write -> Write {file_path, content}. The path is made absolute against the working
           directory Claude Code states in its prompt ("Primary working directory: ..."),
           as the tool's schema asks (2.1.332 also accepts a relative path).
           The Write tool's description says overwriting a file not Read in this session
           fails (2.1.332 did not enforce it for a committed, unchanged file, other versions
           do), so when the file exists the step is answered in two turns: first a Read
           (tool_use id "toolu_stubread_..."), then, once that result is in, the Write.
  shell -> Bash {command, description}
  text  -> a final text message (stop_reason end_turn). With `--json-schema`, Claude Code
           offers a tool "StructuredOutput" whose input_schema is the schema (nothing else in
           the request changes) and only counts the answer given through it: the run ends
           right after a valid call, with no further request, and prints the input as
           `structured_output` (and, compact, as `result`). So when the request offers that
           tool, the conversation's final text step (or a request past it) whose text is a
           JSON object is answered as a tool_use of StructuredOutput with that object as input
           (stop_reason tool_use), every time it is asked: an input the schema rejects gets an
           is_error tool_result and Claude Code asks again, up to MAX_STRUCTURED_OUTPUT_RETRIES
           (5) calls, then prints is_error, subtype error_max_structured_output_retries and
           exits 1. Other text (or a step with "plain": true) stays a text message; 2.1.332
           then sends one "[structured-output-enforce] You MUST call the StructuredOutput
           tool..." user turn, and a second plain text ends the run as a success with that
           text as `result` and no `structured_output` key.
Usage comes from the script: input -> input_tokens, cached -> cache_read_input_tokens, and
an optional cache_write -> cache_creation_input_tokens; output -> output_tokens. Streaming
puts input and cache counts in message_start (output_tokens 1 there, as the API does) and
the final output_tokens in message_delta.
"""

import json
import os
import re
import uuid

from common import CURRENT, route

PRE_READ = "toolu_stubread_"
STRUCTURED = "StructuredOutput"
MODELS = [
    ("claude-sonnet-4-5-20250929", "Claude Sonnet 4.5"),
    ("claude-opus-4-1-20250805", "Claude Opus 4.1"),
    ("claude-haiku-4-5-20251001", "Claude Haiku 4.5"),
]


def _text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if isinstance(b, dict):
            if isinstance(b.get("text"), str):
                out.append(b["text"])
            elif "content" in b:
                out.append(_text_of(b["content"]))
    return "\n".join(out)


def _cwd(body):
    """The working directory Claude Code states in its prompt.

    Claude Code 2.1.x puts its "# Environment" section in a role "system" message inside
    `messages`, not in the top-level `system`; older versions put it in `system`."""
    texts = [_text_of(body.get("system"))]
    texts += [_text_of(m.get("content")) for m in body.get("messages", []) if m.get("role") != "assistant"]
    for t in texts:
        m = re.search(r"(?:Primary working directory|Working directory|cwd):\s*(\S+)", t or "")
        if m:
            return m.group(1).strip("`'\"")
    return None


def _tool_uses(msg):
    c = msg.get("content")
    if not isinstance(c, list):
        return []
    return [b for b in c if isinstance(b, dict) and b.get("type") == "tool_use"]


def _turns(body):
    """(model turns with tool_use that count as steps, the last assistant message or None)."""
    n, last = 0, None
    for m in body.get("messages", []):
        if m.get("role") != "assistant":
            continue
        last = m
        uses = _tool_uses(m)
        if uses and not all(str(u.get("id", "")).startswith(PRE_READ) for u in uses):
            n += 1
    return n, last


def _tool_names(body):
    return [t.get("name") for t in body.get("tools", []) if isinstance(t, dict)]


def _tool_name(body, *candidates):
    names = _tool_names(body)
    for c in candidates:
        if c in names:
            return c
    lower = {str(n).lower(): n for n in names}
    for c in candidates:
        if c.lower() in lower:
            return lower[c.lower()]
    return candidates[0]


def _schema_props(body, name):
    for t in body.get("tools", []):
        if isinstance(t, dict) and t.get("name") == name:
            return (t.get("input_schema") or {}).get("properties") or {}
    return {}


def _blocks_for(step, body, turns, last, final=False):
    """The assistant content blocks and stop_reason for a step (`final`: the conversation's
    last step, or a request past it)."""
    if "write" in step:
        w = step["write"]
        path = w["path"]
        if not os.path.isabs(path):
            cwd = _cwd(body)
            if cwd:
                path = os.path.join(cwd, path)
        last_ids = [str(u.get("id", "")) for u in _tool_uses(last)] if last else []
        pre_id = f"{PRE_READ}{turns}_"
        already_read = any(i.startswith(pre_id) for i in last_ids)
        if os.path.isabs(path) and os.path.exists(path) and not already_read:
            read = _tool_name(body, "Read")
            return [{"type": "tool_use", "id": pre_id + uuid.uuid4().hex[:12], "name": read,
                     "input": {"file_path": path}}], "tool_use"
        name = _tool_name(body, "Write")
        props = _schema_props(body, name)
        key_path = "file_path" if "file_path" in props or not props else ("path" if "path" in props else "file_path")
        return [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name,
                 "input": {key_path: path, "content": w.get("content", "")}}], "tool_use"
    if "shell" in step:
        name = _tool_name(body, "Bash")
        return [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name,
                 "input": {"command": step["shell"], "description": "Run a command"}}], "tool_use"
    text = str(step.get("text", "Done."))
    structured = _structured(body, step, final)
    if structured is not None:
        name, value = structured
        return [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name,
                 "input": value}], "tool_use"
    return [{"type": "text", "text": text}], "end_turn"


def _structured(body, step, final):
    """(tool name, input) when a text step is to be answered through the structured-output
    tool, else None: the step is the conversation's final one (or past it), the request
    offers the tool, the step has no "plain": true and its text is a JSON object."""
    if not final or step.get("plain") or STRUCTURED not in _tool_names(body):
        return None
    try:
        value = json.loads(str(step.get("text", "")))
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return STRUCTURED, value


def _usage(req):
    i, o, c = req.stub.usage()
    w = int(req.stub.script.get("usage", {}).get("cache_write", 0))
    return {"input_tokens": i, "cache_creation_input_tokens": w, "cache_read_input_tokens": c,
            "output_tokens": o}


def _reply(req, body, blocks, stop_reason, usage=None):
    model = body.get("model") or MODELS[0][0]
    mid = "msg_" + uuid.uuid4().hex[:24]
    usage = usage or _usage(req)
    if not body.get("stream"):
        req.send_json(200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                            "content": blocks, "stop_reason": stop_reason, "stop_sequence": None,
                            "usage": usage}, {"request-id": "req_" + mid[4:]})
        return
    start_usage = dict(usage, output_tokens=1)
    ev = [("message_start", {"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}})]
    ev.append(("ping", {"type": "ping"}))
    for idx, b in enumerate(blocks):
        if b["type"] == "text":
            ev.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                               "content_block": {"type": "text", "text": ""}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                               "delta": {"type": "text_delta", "text": b["text"]}}))
        else:
            ev.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                               "content_block": {"type": "tool_use", "id": b["id"],
                                                                 "name": b["name"], "input": {}}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                               "delta": {"type": "input_json_delta",
                                                         "partial_json": json.dumps(b["input"])}}))
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
    ev.append(("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                 "usage": {"output_tokens": usage["output_tokens"]}}))
    ev.append(("message_stop", {"type": "message_stop"}))
    req.send_sse(ev, {"request-id": "req_" + mid[4:]})


@route("POST", r"^/v1/messages/count_tokens$")
def count_tokens(req):
    body = req.body if isinstance(req.body, dict) else {}
    n = len(json.dumps(body.get("messages", ""))) // 4 + len(json.dumps(body.get("system", ""))) // 4
    req.send_json(200, {"input_tokens": max(n, 1)})


@route("POST", r"^/v1/messages$")
def messages(req):
    body = req.body if isinstance(req.body, dict) else {}
    if not body.get("tools"):
        _reply(req, body, [{"type": "text", "text": "OK"}], "end_turn",
               {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                "output_tokens": 1})
        return
    if req.stub.take_rate_limit():
        ra = req.stub.retry_after()
        req.send_json(429, {"type": "error", "error": {
            "type": "rate_limit_error",
            "message": "This request would exceed the rate limit for your organization of "
                       "50,000 input tokens per minute. Please try again later."}},
            {"retry-after": str(ra), "request-id": "req_stub429",
             "anthropic-ratelimit-requests-limit": "50",
             "anthropic-ratelimit-requests-remaining": "0"})
        return
    turns, last = _turns(body)
    steps = req.stub.steps_for(getattr(CURRENT, "text", ""))
    blocks, stop = _blocks_for(req.stub.step(turns), body, turns, last,
                               final=turns >= len(steps) - 1)
    _reply(req, body, blocks, stop)


def _model_obj(mid, name):
    return {"type": "model", "id": mid, "display_name": name, "created_at": "2025-01-01T00:00:00Z"}


@route("GET", r"^/v1/models/(?P<id>[^/]+)$")
def model_one(req):
    mid = req.path.rsplit("/", 1)[1]
    req.send_json(200, _model_obj(mid, mid))


@route("GET", r"^/v1/models$")
def models(req):
    data = [_model_obj(m, n) for m, n in MODELS]
    req.send_json(200, {"data": data, "has_more": False, "first_id": data[0]["id"],
                        "last_id": data[-1]["id"]})


@route("HEAD", r"^/(api/hello)?$")
def head_root(req):
    h = req.handler
    h.send_response(200)
    h.send_header("content-length", "0")
    h.end_headers()


@route("GET", r"^/(api/hello)?$")
def get_root(req):
    req.send_json(200, {})
