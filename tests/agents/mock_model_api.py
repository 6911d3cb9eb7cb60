#!/usr/bin/env python3
"""A scripted model API on loopback for the agent end-to-end tests: speaks the Anthropic Messages
API, the OpenAI Responses and Chat Completions APIs and the Gemini API, streaming (SSE) where the
client asks for it. It plays one script, whatever the prompt: a request that offers a shell tool
and holds no tool result yet gets one call of that tool with COMMAND; a request that carries the
tool's result gets the final answer FINAL; anything else (titles, probes, classifiers) a short
answer. Every request is appended to LOG as one JSON line (method, path, headers, body), so a test
can check what reached the model. Prints {"port": N} once listening, serves until stdin closes.

usage: mock_model_api.py cert=SRV.pem key=SRV.key log=REQUESTS.jsonl command=SHELL final=TEXT
"""
import http.server
import json
import socketserver
import ssl
import sys
import threading

args = dict(a.split("=", 1) for a in sys.argv[1:])
COMMAND = args["command"]
FINAL = args.get("final", "cordon-e2e: done")
log_lock = threading.Lock()

# Shell tools as each agent names them; the first one a request offers is the one called.
SHELL_TOOLS = ("Bash", "bash", "shell", "shell_command", "exec_command", "run_shell_command",
               "local_shell")


def record(handler, body):
    entry = {"method": handler.command, "path": handler.path,
             "headers": {k.lower(): v for k, v in handler.headers.items()},
             "body": body.decode("utf-8", "replace")}
    with log_lock, open(args["log"], "a") as f:
        f.write(json.dumps(entry) + "\n")


def shell_arguments(schema):
    """The tool's arguments for COMMAND, shaped by its parameter schema."""
    props = (schema or {}).get("properties", {})
    if "cmd" in props:
        return {"cmd": COMMAND}
    if props.get("command", {}).get("type") == "array":
        return {"command": ["bash", "-lc", COMMAND]}
    out = {"command": COMMAND}
    if "description" in props:
        out["description"] = "cordon end-to-end tool call"
    return out


def pick_tool(tools):
    """(name, arguments) of the first shell tool among `tools` [(name, schema)], or None."""
    by_name = {name: schema for name, schema in tools}
    for name in SHELL_TOOLS:
        if name in by_name:
            return name, shell_arguments(by_name[name])
    return None


def mentions(obj, key, values):
    """Whether any dict nested in obj has obj[key] in values."""
    if isinstance(obj, dict):
        if obj.get(key) in values:
            return True
        return any(mentions(v, key, values) for v in obj.values())
    if isinstance(obj, list):
        return any(mentions(v, key, values) for v in obj)
    return False


def fill_schema(schema):
    """A value of the shape a JSON schema (or Gemini's upper-case schema) describes."""
    kind = str(schema.get("type", "object")).lower()
    if "enum" in schema:
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object":
        return {k: fill_schema(v) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return "mock"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    # ---- plumbing ----

    def body_json(self):
        n = int(self.headers.get("Content-Length", "0") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self.read_chunked()
        record(self, raw)
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def read_chunked(self):
        out = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def send_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, obj, name=None):
        text = ("event: %s\n" % name if name else "") + "data: %s\n\n" % json.dumps(obj)
        self.chunk(text.encode())

    def end_sse(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---- routes ----

    def do_GET(self):
        record(self, b"")
        if self.path.rstrip("/").endswith("/models") or "/models?" in self.path:
            self.send_json({"object": "list", "data": [{"id": "mock-model", "object": "model"}],
                            "models": []})
            return
        self.send_json({"error": {"message": "not served by the mock: " + self.path}}, 404)

    def do_HEAD(self):
        record(self, b"")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        req = self.body_json()
        path = self.path.split("?", 1)[0]
        if path.endswith("/messages/count_tokens"):
            self.send_json({"input_tokens": 100})
        elif path.endswith("/messages"):
            self.anthropic(req)
        elif path.endswith("/responses"):
            self.openai_responses(req)
        elif path.endswith("/chat/completions"):
            self.chat(req)
        elif ":streamGenerateContent" in path:
            self.gemini(req, stream=True)
        elif ":generateContent" in path:
            self.gemini(req, stream=False)
        elif ":countTokens" in path:
            self.send_json({"totalTokens": 100})
        else:
            self.send_json({"error": {"message": "not served by the mock: " + self.path}}, 404)

    # Anthropic Messages: tool_use / tool_result content blocks.
    def anthropic(self, req):
        done = mentions(req.get("messages"), "type", ("tool_result",))
        tool = None if done else pick_tool(
            [(t.get("name"), t.get("input_schema")) for t in req.get("tools", [])])
        text = FINAL if done else "ok"
        model = req.get("model", "mock-model")
        if tool:
            block = {"type": "tool_use", "id": "toolu_cordon1", "name": tool[0], "input": tool[1]}
        else:
            block = {"type": "text", "text": text}
        stop = "tool_use" if tool else "end_turn"
        usage = {"input_tokens": 100, "output_tokens": 10}
        if not req.get("stream"):
            self.send_json({"id": "msg_cordon", "type": "message", "role": "assistant",
                            "model": model, "content": [block], "stop_reason": stop,
                            "stop_sequence": None, "usage": usage})
            return
        self.start_sse()
        self.event({"type": "message_start",
                    "message": {"id": "msg_cordon", "type": "message", "role": "assistant",
                                "model": model, "content": [], "stop_reason": None,
                                "stop_sequence": None,
                                "usage": {"input_tokens": 100, "output_tokens": 1}}},
                   "message_start")
        if tool:
            start = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(tool[1])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": text}
        self.event({"type": "content_block_start", "index": 0, "content_block": start},
                   "content_block_start")
        self.event({"type": "content_block_delta", "index": 0, "delta": delta},
                   "content_block_delta")
        self.event({"type": "content_block_stop", "index": 0}, "content_block_stop")
        self.event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 10}}, "message_delta")
        self.event({"type": "message_stop"}, "message_stop")
        self.end_sse()

    # OpenAI Responses: function_call / function_call_output input items.
    def openai_responses(self, req):
        done = mentions(req.get("input"), "type",
                        ("function_call_output", "custom_tool_call_output",
                         "local_shell_call_output"))
        tools = [(t.get("name"), t.get("parameters")) for t in req.get("tools", [])]
        tool = None if done else pick_tool(tools)
        if tool:
            item = {"type": "function_call", "id": "fc_cordon1", "call_id": "call_cordon1",
                    "name": tool[0], "arguments": json.dumps(tool[1]), "status": "completed"}
        else:
            item = {"type": "message", "id": "msg_cordon1", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": FINAL if done else "ok",
                                 "annotations": []}]}
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 110}
        resp = {"id": "resp_cordon", "object": "response", "created_at": 1, "status": "completed",
                "model": req.get("model", "mock-model"), "output": [item], "usage": usage}
        if not req.get("stream"):
            self.send_json(resp)
            return
        self.start_sse()
        self.event({"type": "response.created", "sequence_number": 0,
                    "response": dict(resp, status="in_progress", output=[], usage=None)},
                   "response.created")
        self.event({"type": "response.output_item.added", "sequence_number": 1,
                    "output_index": 0, "item": dict(item, status="in_progress")},
                   "response.output_item.added")
        if item["type"] == "message":
            self.event({"type": "response.output_text.delta", "sequence_number": 2,
                        "item_id": item["id"], "output_index": 0, "content_index": 0,
                        "delta": item["content"][0]["text"]}, "response.output_text.delta")
        self.event({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0,
                    "item": item}, "response.output_item.done")
        self.event({"type": "response.completed", "sequence_number": 4, "response": resp},
                   "response.completed")
        self.end_sse()

    # OpenAI Chat Completions: tool_calls / role "tool" messages.
    def chat(self, req):
        done = mentions(req.get("messages"), "role", ("tool",))
        tools = [(t.get("function", {}).get("name"), t.get("function", {}).get("parameters"))
                 for t in req.get("tools", [])]
        tool = None if done else pick_tool(tools)
        model = req.get("model", "mock-model")
        base = {"id": "chatcmpl-cordon", "object": "chat.completion.chunk", "created": 1,
                "model": model}
        if tool:
            call = {"index": 0, "id": "call_cordon1", "type": "function",
                    "function": {"name": tool[0], "arguments": json.dumps(tool[1])}}
            delta, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": FINAL if done else "ok"}, "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if not req.get("stream"):
            msg = dict(delta)
            if tool:
                msg["tool_calls"] = [{k: v for k, v in call.items() if k != "index"}]
            self.send_json(dict(base, object="chat.completion", usage=usage,
                                choices=[{"index": 0, "message": msg, "finish_reason": finish}]))
            return
        self.start_sse()
        self.event(dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}]))
        self.event(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}],
                        usage=usage))
        self.chunk(b"data: [DONE]\n\n")
        self.end_sse()

    # Gemini: functionCall / functionResponse parts.
    def gemini(self, req, stream):
        done = any("functionResponse" in p for c in req.get("contents", [])
                   for p in c.get("parts", []))
        tools = [(d.get("name"), d.get("parameters") or d.get("parametersJsonSchema"))
                 for t in req.get("tools", []) for d in t.get("functionDeclarations", [])]
        tool = None if done else pick_tool(tools)
        config = req.get("generationConfig", {})
        if tool:
            part = {"functionCall": {"name": tool[0], "args": tool[1]}}
        elif config.get("responseMimeType") == "application/json":
            # Side questions with a schema (who speaks next, how complex the task is): an answer
            # of the schema's shape, "user" where it asks who speaks, so the turn ends.
            schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
            part = {"text": json.dumps(fill_schema(schema))}
        else:
            part = {"text": FINAL if done else "ok"}
        resp = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10,
                                  "totalTokenCount": 110},
                "modelVersion": "mock-model"}
        if not stream:
            self.send_json(resp)
            return
        self.start_sse()
        self.chunk(("data: %s\r\n\r\n" % json.dumps(resp)).encode())
        self.end_sse()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


srv = Server(("127.0.0.1", int(args.get("port", "0"))), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(args["cert"], args["key"])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print(json.dumps({"port": srv.server_address[1]}), flush=True)
sys.stdin.read()
