"""The server shared by every protocol module: routing, the script, request log, replies.

The script is a JSON object:

    {
      "rate_limit": 0,        # the first N requests of the agent's main loop are answered 429
      "retry_after": 1,       # seconds, in the 429's retry-after header and body where the API has one
      "usage": {"input": 1000, "output": 50, "cached": 0},   # tokens reported per response
      "steps": [              # the main conversation, one step per model turn
        {"write": {"path": "calc.py", "content": "..."}},   # edit a file with the agent's own tool
        {"shell": "python3 -m unittest -q"},                # run a command with the agent's own tool
        {"text": "Fixed the off-by-one."}                    # the final message; ends the turn
      ]
    }

Instead of "steps", a script may hold "conversations": a list of {"match": [TEXT…],
"unless": [TEXT…], "steps": […]}; a request is answered from the first conversation whose
`match` texts all appear in the request's body and whose `unless` texts do not (a maker's and a
reviewer's conversations told apart by their prompts). A conversation without `match` matches
every request.

Which step answers a request is decided from the request alone: step i answers the request
whose conversation already holds i model turns (each module counts them in its own format), so
a retried request gets the same answer and side requests (titles, summaries) do not advance it.
A request past the last step gets the last `text` step (with "endless": true, the last step
again, whatever it is: a model that never stops calling tools). Side requests that are not the main
loop (no tools offered, where the module can tell) are answered with a short plain text.
"""

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, parse_qs


class Stub:
    def __init__(self, script_path, log_path):
        with open(script_path) as f:
            self.script = json.load(f)
        self.steps = self.script.get("steps", [])
        self.log_path = log_path
        self.lock = threading.Lock()
        self.rate_limited = 0

    def usage(self):
        u = self.script.get("usage", {})
        return int(u.get("input", 1000)), int(u.get("output", 50)), int(u.get("cached", 0))

    def steps_for(self, text):
        """The steps of the conversation the request (its body as text) belongs to."""
        for c in self.script.get("conversations", []):
            if all(m in text for m in c.get("match", [])) and not any(
                u in text for u in c.get("unless", [])
            ):
                return c.get("steps", [])
        return self.script.get("steps", [])

    def step(self, turns_so_far):
        """The step for a request whose conversation holds `turns_so_far` model turns."""
        steps = self.steps_for(getattr(CURRENT, "text", ""))
        if not steps:
            return {"text": "Nothing to do."}
        if turns_so_far < len(steps):
            return steps[turns_so_far]
        # A model that never stops calling tools: the last step, again and again.
        if self.script.get("endless"):
            return steps[-1]
        for s in reversed(steps):
            if "text" in s:
                return s
        return {"text": "Done."}

    def take_rate_limit(self):
        """True while the script's 429s are not used up (one per call)."""
        with self.lock:
            if self.rate_limited < int(self.script.get("rate_limit", 0)):
                self.rate_limited += 1
                return True
            return False

    def retry_after(self):
        return int(self.script.get("retry_after", 1))

    def log(self, entry):
        if not self.log_path:
            return
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")


# The body of the request being answered, as text, for `Stub.steps_for` (one per thread).
CURRENT = threading.local()


class Request:
    def __init__(self, handler, stub):
        self.handler = handler
        self.stub = stub
        u = urlparse(handler.path)
        self.method = handler.command
        self.path = u.path
        self.query = parse_qs(u.query)
        self.headers = handler.headers
        n = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(n) if n else b""
        if handler.headers.get("content-encoding") == "gzip" and raw:
            import gzip
            raw = gzip.decompress(raw)
        elif handler.headers.get("content-encoding") == "zstd" and raw:
            raise ValueError("zstd request bodies are not supported")
        try:
            self.body = json.loads(raw) if raw else None
        except ValueError:
            self.body = raw.decode("utf-8", "replace")

    def send_json(self, status, obj, headers=None):
        data = json.dumps(obj).encode()
        h = self.handler
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def send_sse(self, events, headers=None):
        """events: (event_name or None, data dict or str) pairs, sent as text/event-stream."""
        h = self.handler
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("connection", "close")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        for name, data in events:
            chunk = ""
            if name:
                chunk += f"event: {name}\n"
            payload = data if isinstance(data, str) else json.dumps(data)
            chunk += f"data: {payload}\n\n"
            h.wfile.write(chunk.encode())
            h.wfile.flush()
        h.close_connection = True


# (method, path regex, handler(req)) from every module; first match wins.
ROUTES = []


def route(method, pattern):
    rx = re.compile(pattern)

    def register(fn):
        ROUTES.append((method, rx, fn))
        return fn

    return register


def _load_modules():
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py") and name not in ("common.py", "__main__.py"):
            __import__(name[:-3])


def serve(script_path, port_file, log_path, port=0):
    stub = Stub(script_path, log_path)
    _load_modules()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _dispatch(self):
            req = Request(self, stub)
            CURRENT.text = req.body if isinstance(req.body, str) else json.dumps(req.body)
            stub.log({"method": req.method, "path": self.path, "body": req.body})
            for method, rx, fn in ROUTES:
                if method == req.method and rx.search(req.path):
                    fn(req)
                    return
            req.send_json(404, {"error": {"message": f"no route for {req.method} {req.path}"}})

        def do_POST(self):
            self._dispatch()

        def do_GET(self):
            self._dispatch()

        def do_HEAD(self):
            self._dispatch()

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, port_file)
    server.serve_forever()
