"""The Gemini API (generativelanguage.googleapis.com) as the Gemini CLI speaks it.

Point the CLI here with GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT and any GEMINI_API_KEY.
It calls (v1beta, API-key auth):

    POST /v1beta/models/{model}:streamGenerateContent?alt=sse   the main loop, and side requests
    POST /v1beta/models/{model}:generateContent                 side requests (JSON schema answers)
    POST /v1beta/models/{model}:countTokens                     token estimates

Main-loop requests are the ones that offer tools (`tools[].functionDeclarations`). The step is
the number of model turns in `contents` that carry a functionCall (the CLI's own bookkeeping
turns carry none). `write` becomes a call of the CLI's file-writing tool (`write_file`, with an
absolute `file_path`: the CLI's workspace directory is read from the request), `shell` a call of
its shell tool (`run_shell_command`), `text` the final answer.

Side requests (no tools: next-speaker checks, routing, summaries) are answered with JSON that
fits the requested response schema when there is one, else a short text; they take no step and
are never rate limited. Rate limits are Google's 429 RESOURCE_EXHAUSTED with a RetryInfo.
"""

import json
import os
import re
import uuid

from common import route

MODEL_CALL = r"^/v1[a-z0-9]*/models/([^/:]+):(streamGenerateContent|generateContent)$"


def _declarations(body):
    decls = []
    for tool in (body or {}).get("tools") or []:
        decls.extend(tool.get("functionDeclarations") or tool.get("function_declarations") or [])
    return decls


def _model_turns(body):
    """Model turns in the conversation that called a tool."""
    n = 0
    for c in (body or {}).get("contents") or []:
        if c.get("role") == "model" and any("functionCall" in p for p in c.get("parts") or []):
            n += 1
    return n


def _system_text(body):
    si = (body or {}).get("systemInstruction") or (body or {}).get("system_instruction") or {}
    if isinstance(si, str):
        return si
    return "".join(p.get("text", "") for p in si.get("parts") or [])


def _all_text(body):
    out = [_system_text(body)]
    for c in (body or {}).get("contents") or []:
        for p in c.get("parts") or []:
            if isinstance(p.get("text"), str):
                out.append(p["text"])
    return "\n".join(out)


# The workspace directory, as the CLI states it to the model.
_CWD_PATTERNS = [
    r"Workspace Directories:\**\s*\n\s*-\s*(/[^\n]+?)\s*\n",  # 0.61: <session_context>
    r"current working \(project\) directory being:\s*(/[^\n]+?)\s*\n",  # older CLIs
    r"I'm currently working in the directory:\s*(/[^\n]+?)\s*\n",
]


def _workspace(body):
    text = _all_text(body)
    for pat in _CWD_PATTERNS:
        m = re.search(pat, text)
        if m:
            return m.group(1).rstrip(".,")
    return None


def _props(decl):
    params = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
    return params.get("properties") or {}, params.get("required") or []


def _pick(decls, names, keyword):
    by_name = {d.get("name"): d for d in decls}
    for n in names:
        if n in by_name:
            return by_name[n]
    for d in decls:
        if keyword in (d.get("name") or ""):
            return d
    return None


def _call_write(body, decls, step):
    d = _pick(decls, ["write_file", "WriteFile"], "write")
    if d is None:
        return None
    props, _ = _props(d)
    path = step["path"]
    if not os.path.isabs(path):
        root = _workspace(body)
        if root:
            path = os.path.join(root, path)
    path_key = next((k for k in ("file_path", "absolute_path", "path") if k in props), "file_path")
    content_key = next((k for k in ("content", "contents", "text") if k in props), "content")
    return {"name": d["name"], "args": {path_key: path, content_key: step["content"]}}


def _call_shell(decls, step):
    d = _pick(decls, ["run_shell_command", "shell"], "shell")
    if d is None:
        return None
    props, required = _props(d)
    args = {"command": step["shell"]}
    if "description" in props:
        args["description"] = "Run the command."
    for k in required:
        if k not in args:
            args[k] = ""
    return {"name": d["name"], "args": args}


def _usage(stub):
    inp, out, cached = stub.usage()
    u = {
        "promptTokenCount": inp,
        "candidatesTokenCount": out,
        "totalTokenCount": inp + out,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": inp}],
    }
    if cached:
        u["cachedContentTokenCount"] = cached
        u["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    return u


def _response(parts, model, usage, finish="STOP"):
    r = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:22],
    }
    if usage is not None:
        r["usageMetadata"] = usage
    return r


def _from_schema(schema, name=""):
    """A value that fits a JSON schema (or the API's OpenAPI-style Schema)."""
    if not isinstance(schema, dict):
        return "ok"
    t = schema.get("type")
    t = (t[0] if isinstance(t, list) and t else t or "").lower()
    if "enum" in schema and schema["enum"]:
        # Next-speaker checks: the user speaks next, so the turn ends.
        if "user" in schema["enum"]:
            return "user"
        return schema["enum"][0]
    if t == "object" or "properties" in schema:
        return {k: _from_schema(v, k) for k, v in (schema.get("properties") or {}).items()}
    if t == "array":
        return []
    if t in ("integer", "number"):
        return schema.get("minimum", 1)  # the router's complexity_score is 1..100
    if t == "boolean":
        return False
    return "ok" if name != "reasoning" else "The user should speak next."


def _side(req, model, streaming):
    body = req.body if isinstance(req.body, dict) else {}
    cfg = body.get("generationConfig") or {}
    schema = cfg.get("responseJsonSchema") or cfg.get("responseSchema")
    if schema is not None or cfg.get("responseMimeType") == "application/json":
        text = json.dumps(_from_schema(schema or {"type": "object"}))
    else:
        text = "ok"
    _send(req, _response([{"text": text}], model, _usage(req.stub)), streaming)


def _send(req, resp, streaming):
    if streaming:
        req.send_sse([(None, resp)])
    else:
        req.send_json(200, resp)


def _rate_limited(req):
    delay = req.stub.retry_after()
    req.send_json(
        429,
        {
            "error": {
                "code": 429,
                "message": "Resource has been exhausted (e.g. check quota).",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay}s"},
                ],
            }
        },
    )


@route("POST", MODEL_CALL)
def generate(req):
    m = re.search(MODEL_CALL, req.path)
    model, method = m.group(1), m.group(2)
    streaming = method == "streamGenerateContent"
    body = req.body if isinstance(req.body, dict) else {}
    decls = _declarations(body)
    if not decls:
        _side(req, model, streaming)
        return
    if req.stub.take_rate_limit():
        _rate_limited(req)
        return
    step = req.stub.step(_model_turns(body))
    call = None
    if "write" in step:
        call = _call_write(body, decls, step["write"])
    elif "shell" in step:
        call = _call_shell(decls, step)
    usage = _usage(req.stub)
    if call is not None:
        parts = [{"functionCall": call}]
    else:
        parts = [{"text": step.get("text", "Done.")}]
    if streaming:
        # A first chunk without usage, then the rest and the usage with the finish reason,
        # the way the API streams.
        if call is None and len(parts[0]["text"]) > 1:
            t = parts[0]["text"]
            head, tail = t[: len(t) // 2], t[len(t) // 2 :]
            first = _response([{"text": head}], model, None)
            del first["candidates"][0]["finishReason"]
            last = _response([{"text": tail}], model, usage)
            req.send_sse([(None, first), (None, last)])
        else:
            req.send_sse([(None, _response(parts, model, usage))])
    else:
        req.send_json(200, _response(parts, model, usage))


@route("POST", r"^/v1[a-z0-9]*/models/[^/:]+:countTokens$")
def count_tokens(req):
    inp, _, _ = req.stub.usage()
    req.send_json(200, {"totalTokens": inp})


@route("POST", r"^/v1[a-z0-9]*/models/[^/:]+:(embedContent|batchEmbedContents)$")
def embed(req):
    body = req.body if isinstance(req.body, dict) else {}
    n = len(body.get("requests") or []) or 1
    req.send_json(200, {"embeddings": [{"values": [0.0] * 8} for _ in range(n)]})

