"""OpenAI Chat Completions (`POST /v1/chat/completions`, streaming or not), as aider speaks it
through litellm: `aider --model openai/stub` with OPENAI_API_BASE=http://127.0.0.1:PORT/v1 and
any OPENAI_API_KEY. aider 0.86.2 never calls `GET /v1/models`. For aider to print a cost, give
the model a price: AIDER_MODEL_METADATA_FILE=scripts/aider-model-metadata.json.

aider offers no tools: it reads edits from the model's text, in the edit format its system
prompt asks for (an unknown model such as `openai/stub` gets `whole`; `openai/gpt-4o` gets
`diff`). This module finds that format in the system prompt (`whole` file listings, `diff` /
`diff-fenced` SEARCH/REPLACE blocks, `udiff`) and writes a `write` step as a whole-file edit in
it (SEARCH = the file's current text, taken from the request). A `shell` step is a ```bash
block, which aider shows but does not run (`--yes-always` answers no to shell commands); in
`whole` and `udiff`, which read every fenced block as an edit, it is an inline `command`. A
`text` step is the text itself.

How aider's conversation goes, and so how steps are counted:

* With `--message`/`--message-file` aider sends the task, applies the edits of the reply, and
  stops, unless it "reflects": a follow-up user message after an edit it could not apply, lint
  errors, failed `--auto-test` tests, or files it added to the chat because the reply named
  them. So one reply must carry everything: consecutive `write` and `shell` steps and the `text`
  step after them form one reply ("group"); group g answers the request that holds g of this
  stub's earlier replies. aider's own assistant messages ("Ok.", examples in the system prompt
  or as messages, "Ok, any changes I propose will be to those files.") are not counted: an
  assistant message counts when it is recognisably one of this stub's replies.
* aider edits only files "added to the chat" (their full text is in a user message starting
  "I have *added these files to the chat*"). A file named in the task is added up front with
  `--yes-always`. When a group writes an existing file that is not in the chat (it shows in
  the repo map), the stub first answers "Please add PATH to the chat." (not counted): aider
  asks "Add file to the chat?", `--yes-always` says yes, and aider asks again with the file.
  aider does the same, dropping the reply's edits, when a reply names a file it has not added
  (without a repo map the stub cannot tell): a reply followed by "I added these files to the
  chat: ..." is not counted, so the same group answers again.
* Side requests (commit messages, chat summaries; recognised by their system prompt) get a
  short plain text and are never rate limited.

Usage: prompt_tokens = usage.input + usage.cached, completion_tokens = usage.output,
prompt_tokens_details.cached_tokens = usage.cached (OpenAI counts cached tokens inside
prompt_tokens). Streaming replies end with the usage chunk (`choices: []`) when
`stream_options.include_usage` is set, then `data: [DONE]`. aider streams without
stream_options, so it never sees the usage and counts tokens itself (tiktoken); with
`--no-stream` it prints the script's usage.

Rate limit: HTTP 429 with OpenAI's error JSON (`code: rate_limit_exceeded`) and `retry-after`.
"""

import re
import time

from common import CURRENT, route


def CURRENT_TEXT():
    """The body of the request being answered, as text (see common.Stub.steps_for)."""
    return getattr(CURRENT, "text", "")

FILES_PREFIX = "I have *added these files to the chat*"
FENCES = [
    ("```", "```"),
    ("````", "````"),
    ("<source>", "</source>"),
    ("<code>", "</code>"),
    ("<pre>", "</pre>"),
    ("<codeblock>", "</codeblock>"),
    ("<sourcecode>", "</sourcecode>"),
]
WRITE_INTRO = "Here is the updated `{path}`:"
ADD_FILE = "Please add {path} to the chat so I can edit it."
ADDED_FILES = "I added these files to the chat:"


def text_of(content):
    """A message's content as text (a string, or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def edit_format(messages):
    """The edit format aider's system prompt asks for."""
    sys_text = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
    if not sys_text and messages:
        sys_text = text_of(messages[0].get("content"))
    if "*file listing*" in sys_text or "output a copy of each file" in sys_text:
        return "whole"
    if "unified diff" in sys_text or "diff -U0" in sys_text:
        return "udiff"
    # diff-fenced examples put the path inside the fence, diff examples put it before.
    if re.search(r"^(```|````|<\w+>)\w*\n[^\n]+\n<<<<<<< SEARCH$", sys_text, re.M):
        return "diff-fenced"
    return "diff"


def chat_files(messages):
    """{path: (content, (fence_open, fence_close))} of the files aider has added to the chat."""
    files = {}
    for m in messages:
        if m.get("role") != "user":
            continue
        t = text_of(m.get("content"))
        if not t.startswith(FILES_PREFIX):
            continue
        lines = t.splitlines(keepends=True)
        i = 0
        while i + 1 < len(lines):
            name = lines[i].rstrip("\n")
            fence = next((f for f in FENCES if lines[i + 1].rstrip("\n") == f[0]), None)
            if name and fence:
                j = i + 2
                body = []
                while j < len(lines) and lines[j].rstrip("\n") != fence[1]:
                    body.append(lines[j])
                    j += 1
                files[name] = ("".join(body), fence)
                i = j + 1
            else:
                i += 1
    return files


def groups(steps):
    """Steps folded into replies: runs of write/shell steps with the text that follows them."""
    out, cur = [], []
    for s in steps:
        cur.append(s)
        if "text" in s:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def pick_fence(files):
    """The fence aider chose for this chat (it parses replies with it): the one around the chat's
    files, else ```."""
    for _, fence in files.values():
        return fence
    return FENCES[0]


def render_write(w, fmt, files):
    path, new = w["path"], w["content"]
    if new and not new.endswith("\n"):
        new += "\n"
    old = files.get(path, (None, None))[0]
    intro = WRITE_INTRO.format(path=path)
    if fmt == "whole":
        fo, fc = pick_fence(files)
        return f"{intro}\n\n{path}\n{fo}\n{new}{fc}\n"
    if fmt == "udiff":
        minus = "".join("-" + line for line in (old or "").splitlines(keepends=True))
        plus = "".join("+" + line for line in new.splitlines(keepends=True))
        src = path if old is not None else "/dev/null"
        return f"{intro}\n\n```diff\n--- {src}\n+++ {path}\n@@ ... @@\n{minus}{plus}```\n"
    fo, fc = pick_fence(files)
    search = old or ""
    block = f"<<<<<<< SEARCH\n{search}=======\n{new}>>>>>>> REPLACE\n"
    if fmt == "diff-fenced":
        return f"{intro}\n\n{fo}\n{path}\n{block}{fc}\n"
    return f"{intro}\n\n{path}\n{fo}\n{block}{fc}\n"


def render_group(group, fmt, files):
    parts = []
    for s in group:
        if "write" in s:
            parts.append(render_write(s["write"], fmt, files))
        elif "shell" in s:
            if fmt in ("whole", "udiff"):
                # These formats read any fenced block as an edit: no fence, and nothing to run.
                parts.append(f"Then run `{s['shell']}`.\n")
            else:
                parts.append(f"Run this:\n\n```bash\n{s['shell']}\n```\n")
        elif "text" in s:
            parts.append(str(s["text"]))
    return "\n".join(parts)


def is_reply_of(group, content):
    """Whether an assistant message is this stub's reply for `group` (file contents aside)."""
    c = content.strip()
    for s in group:
        if "write" in s and WRITE_INTRO.format(path=s["write"]["path"]) not in c:
            return False
        if "shell" in s and s["shell"] not in c:
            return False
        if "text" in s and not c.endswith(str(s["text"]).strip()):
            return False
    return True


def side_request(messages):
    sys_text = " ".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
    if "one-line Git commit messages" in sys_text:
        return "fix: apply requested change"
    if "summarize this partial conversation" in sys_text:
        return "I asked you to fix a bug and you fixed it."
    return None


def answer(stub, messages):
    """(text, is_main_loop) for a request."""
    side = side_request(messages)
    if side is not None:
        return side, False
    steps = stub.steps_for(CURRENT_TEXT())
    gs = groups(steps)
    if not gs:
        return "Nothing to do.", True
    done = 0
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or done >= len(gs):
            continue
        if not is_reply_of(gs[done], text_of(m.get("content"))):
            continue
        nxt = messages[i + 1] if i + 1 < len(messages) else {}
        if nxt.get("role") == "user" and text_of(nxt.get("content")).startswith(ADDED_FILES):
            # aider added the files this reply named and dropped its edits: answer it again.
            continue
        done += 1
    if done >= len(gs):
        last = next((s for s in reversed(steps) if "text" in s), {"text": "Done."})
        return str(last["text"]), True
    group = gs[done]
    fmt = edit_format(messages)
    files = chat_files(messages)
    everything = "\n".join(text_of(m.get("content")) for m in messages)
    for s in group:
        if "write" in s:
            path = s["write"]["path"]
            # An existing file (aider shows it in the repo map, or the request names it; a plain
            # substring test, so test_calc.py counts for calc.py) must be in the chat first.
            if path not in files and path in everything:
                return ADD_FILE.format(path=path), True
    return render_group(group, fmt, files), True


def usage_obj(stub):
    inp, out, cached = stub.usage()
    return {
        "prompt_tokens": inp + cached,
        "completion_tokens": out,
        "total_tokens": inp + cached + out,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def rate_limited(req, model):
    ra = req.stub.retry_after()
    inp, _, _ = req.stub.usage()
    req.send_json(
        429,
        {
            "error": {
                "message": (
                    f"Rate limit reached for {model} in organization org-stub on tokens per min"
                    f" (TPM): Limit 30000, Used 30000, Requested {inp}. Please try again in {ra}s."
                    " Visit https://platform.openai.com/account/rate-limits to learn more."
                ),
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        {
            "retry-after": str(ra),
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": f"{ra}s",
        },
    )


@route("POST", r"^(/v1)?/chat/completions$")
def chat_completions(req):
    body = req.body if isinstance(req.body, dict) else {}
    model = body.get("model", "stub")
    messages = body.get("messages") or []
    text, main = answer(req.stub, messages)
    if main and req.stub.take_rate_limit():
        rate_limited(req, model)
        return
    rid = f"chatcmpl-stub{int(time.time() * 1000)}"
    created = int(time.time())
    if not body.get("stream"):
        req.send_json(
            200,
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage_obj(req.stub),
                "system_fingerprint": "fp_stub",
            },
        )
        return

    def chunk(delta, finish=None):
        return (
            None,
            {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_stub",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            },
        )

    events = [chunk({"role": "assistant", "content": ""})]
    for i in range(0, len(text), 40):
        events.append(chunk({"content": text[i:i + 40]}))
    events.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(
            (
                None,
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": "fp_stub",
                    "choices": [],
                    "usage": usage_obj(req.stub),
                },
            )
        )
    events.append((None, "[DONE]"))
    req.send_sse(events)
