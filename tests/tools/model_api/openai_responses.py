"""OpenAI Responses API, as the Codex CLI speaks it: POST /v1/responses, streamed as SSE.

Point Codex at it with a custom provider (built-in `openai` cannot be overridden):
    -c model_provider=stub -c 'model_providers.stub.name="Stub"'
    -c 'model_providers.stub.base_url="http://127.0.0.1:PORT/v1"'
    -c model_providers.stub.env_key=STUB_API_KEY   (and STUB_API_KEY set to anything)
Custom providers speak HTTP+SSE only; Codex 0.171 calls nothing but POST /v1/responses (the
built-in provider with `openai_base_url` would first try a WebSocket, which is not served).

Codex offers its tools in one of two layouts, depending on the model's entry in its built-in
catalog:

- classic (gpt-5.5, and any model missing from the catalog): the request's top-level `tools`
  hold `exec_command` (`shell_command` / `shell` in other versions) and, for catalog models,
  `apply_patch` (a freeform custom tool, or a function taking {"input": patch});
- code mode (gpt-6.2-sol, the 0.171 default, and the other gpt-6*/5.6 models): `tools` is
  absent and an `additional_tools` input item holds a namespace whose custom tool `exec` runs
  JavaScript that calls nested tools (`await tools.exec_command({cmd})`,
  `await tools.apply_patch(patch)`).

Either way one script step is one tool call (function_call or custom_tool_call) of the model;
the step for a request is the number of such calls already in its `input` (see MARK for
compaction). `write` is an apply_patch envelope (an Update hunk replacing every line when the
file exists under the request's <cwd>, else Add File), or a heredoc through the shell tool when
no apply_patch is offered. A request offering no tools (Codex's compaction summary request) is
a side request: a short text, no rate limit, no step used.

Rate limits: 429 with OpenAI's error JSON (code rate_limit_exceeded) and `retry-after`.
Codex 0.171 retries a 429 only when `retry-after` is present (waiting that long, up to
stream_max_retries = 5 times); `"retry_after": 0` in the script sends no header, so Codex
gives up at once.
"""

import json
import os
import re
import uuid

from common import route

CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")


def _flatten(tools, out):
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            _flatten(t.get("tools"), out)
        else:
            out.append(t)
    return out


def _tools(body):
    """Every tool the request offers: top-level `tools` and `additional_tools` input items."""
    found = _flatten(body.get("tools"), [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            _flatten(item.get("tools"), found)
    return found


# Written into side answers. Codex compacts a long conversation by asking (without tools) for a
# summary and then replacing the history with it, dropping the tool calls it held; the marker
# carries their count across, so the step is still decided from the request alone.
MARK = "[model_api: {} model turns so far]"
MARK_RX = re.compile(r"\[model_api: (\d+) model turns so far\]")


def _texts(item):
    content = item.get("content")
    if isinstance(content, str):
        yield content
    for c in content if isinstance(content, list) else []:
        if isinstance(c, dict) and isinstance(c.get("text"), str):
            yield c["text"]


def _turns(body):
    """Model turns in the conversation: tool calls after the last marker, plus its count."""
    n = 0
    for it in body.get("input") or []:
        if not isinstance(it, dict):
            continue
        if it.get("type") in CALL_TYPES:
            n += 1
        elif it.get("type") == "message":
            marks = [int(m) for t in _texts(it) for m in MARK_RX.findall(t)]
            if marks:
                n = max(marks)
    return n


def _cwd(body):
    for it in body.get("input") or []:
        if not isinstance(it, dict) or it.get("type") != "message":
            continue
        for c in it.get("content") or []:
            text = c.get("text") if isinstance(c, dict) else None
            m = re.search(r"<cwd>([^<]*)</cwd>", text or "")
            if m:
                return m.group(1)
    return None


def _lines(text):
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _patch(path, content, cwd):
    """An apply_patch envelope giving `path` the text `content`: an update hunk replacing every
    line when the file exists under the agent's cwd (read from the request's environment
    context; the stub runs on the same machine), else an added file."""
    new = _lines(content)
    full = os.path.join(cwd, path) if cwd else None
    if full and os.path.isfile(full):
        with open(full, encoding="utf-8", errors="replace") as f:
            old = _lines(f.read())
        if old:
            hunk = "".join("-" + line + "\n" for line in old)
            hunk += "".join("+" + line + "\n" for line in new)
            return f"*** Begin Patch\n*** Update File: {path}\n@@\n{hunk}*** End Patch\n"
    body = "".join("+" + line + "\n" for line in new) or "+\n"
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


def _heredoc(path, content):
    tag = "MVK_STUB_EOF"
    if not content.endswith("\n"):
        content += "\n"
    return f"cat > {json.dumps(path)} <<'{tag}'\n{content}{tag}\n"


def _call_item(step, tools, n, cwd):
    """The output item (a tool call) for a `write` or `shell` step, in the request's layout."""
    by_name = {t.get("name"): t for t in tools if t.get("name")}
    call_id = f"call_stub_{n}"
    if "write" in step:
        w = step["write"]
        patch = _patch(w["path"], w["content"], cwd)
        cmd = None
    else:
        patch = None
        cmd = step["shell"]

    code = by_name.get("exec")
    classic = any(k in by_name for k in ("exec_command", "shell_command", "shell", "apply_patch"))
    if code is not None and code.get("type") == "custom" and not classic:
        desc = code.get("description") or ""
        if patch is not None and "`apply_patch`" in desc:
            js = f"const r = await tools.apply_patch({json.dumps(patch)});\ntext(r);\n"
        else:
            if patch is not None:
                cmd = _heredoc(w["path"], w["content"])
            js = (f"const r = await tools.exec_command({json.dumps({'cmd': cmd})});\n"
                  "text(r.output);\ntext(`exit code: ${r.exit_code}`);\n")
        return {"type": "custom_tool_call", "id": f"ctc_stub_{n}", "call_id": call_id,
                "name": "exec", "input": js, "status": "completed"}

    if patch is not None and "apply_patch" in by_name:
        t = by_name["apply_patch"]
        if t.get("type") == "custom":
            return {"type": "custom_tool_call", "id": f"ctc_stub_{n}", "call_id": call_id,
                    "name": "apply_patch", "input": patch, "status": "completed"}
        return {"type": "function_call", "id": f"fc_stub_{n}", "call_id": call_id,
                "name": "apply_patch", "arguments": json.dumps({"input": patch}),
                "status": "completed"}
    if patch is not None:
        cmd = _heredoc(w["path"], w["content"])
    if "exec_command" in by_name:
        name, args = "exec_command", {"cmd": cmd}
    elif "shell_command" in by_name:
        name, args = "shell_command", {"command": cmd}
    elif "shell" in by_name:
        name, args = "shell", {"command": ["bash", "-lc", cmd]}
    else:
        raise ValueError("the request offers no shell or editing tool: "
                         + ", ".join(sorted(k for k in by_name if k)))
    return {"type": "function_call", "id": f"fc_stub_{n}", "call_id": call_id,
            "name": name, "arguments": json.dumps(args), "status": "completed"}


def _usage(stub):
    inp, out, cached = stub.usage()
    return {"input_tokens": inp,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": inp + out}


def _events(rid, model, item, usage):
    created = {"id": rid, "object": "response", "status": "in_progress", "model": model,
               "output": []}
    ev = [("response.created", {"type": "response.created", "response": created}),
          ("response.in_progress", {"type": "response.in_progress", "response": created})]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        empty = dict(item, status="in_progress", content=[])
        part = {"type": "output_text", "text": "", "annotations": []}
        ev += [
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": empty}),
            ("response.content_part.added", {"type": "response.content_part.added",
                                             "item_id": item["id"], "output_index": 0,
                                             "content_index": 0, "part": part}),
            ("response.output_text.delta", {"type": "response.output_text.delta",
                                            "item_id": item["id"], "output_index": 0,
                                            "content_index": 0, "delta": text}),
            ("response.output_text.done", {"type": "response.output_text.done",
                                           "item_id": item["id"], "output_index": 0,
                                           "content_index": 0, "text": text}),
            ("response.content_part.done", {"type": "response.content_part.done",
                                            "item_id": item["id"], "output_index": 0,
                                            "content_index": 0,
                                            "part": dict(part, text=text)}),
        ]
    else:
        ev.append(("response.output_item.added", {"type": "response.output_item.added",
                                                  "output_index": 0,
                                                  "item": dict(item, status="in_progress")}))
    ev.append(("response.output_item.done", {"type": "response.output_item.done",
                                             "output_index": 0, "item": item}))
    done = dict(created, status="completed", output=[item], usage=usage)
    ev.append(("response.completed", {"type": "response.completed", "response": done}))
    return ev


def _message(text, n):
    return {"type": "message", "id": f"msg_stub_{n}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


@route("POST", r"^(/v1)?/responses$")
def responses(req):
    body = req.body if isinstance(req.body, dict) else {}
    model = body.get("model") or "stub"
    rid = "resp_" + uuid.uuid4().hex
    tools = _tools(body)
    if not tools:
        text = "OK. " + MARK.format(_turns(body))
        req.send_sse(_events(rid, model, _message(text, "side"), _usage(req.stub)))
        return
    if req.stub.take_rate_limit():
        # retry_after 0: neither a retry-after header nor a "try again in" hint
        ra = req.stub.retry_after()
        hint = f" Please try again in {ra}s." if ra > 0 else ""
        headers = {"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "0"}
        if ra > 0:
            headers.update({"retry-after": str(ra), "x-ratelimit-reset-requests": f"{ra}s"})
        req.send_json(429, {"error": {
            "message": (f"Rate limit reached for {model} in organization org-stub on requests "
                        f"per min (RPM): Limit 3, Used 3, Requested 1.{hint} Visit "
                        "https://platform.openai.com/account/rate-limits to learn more."),
            "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
            headers=headers)
        return
    n = _turns(body)
    step = req.stub.step(n)
    if "text" in step:
        item = _message(step["text"], n)
    else:
        try:
            item = _call_item(step, tools, n, _cwd(body))
        except ValueError as e:
            # 400 is not retried: the run fails with this message instead of hanging
            req.send_json(400, {"error": {"message": f"model_api: {e}", "type":
                                          "invalid_request_error", "param": None, "code": None}})
            return
    req.send_sse(_events(rid, model, item, _usage(req.stub)))
