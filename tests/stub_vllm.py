"""A stand-in for ``vllm serve`` on 127.0.0.1, for the HTTP engine's fault tests: the routes logitjudge calls
(``/v1/models``, ``/tokenize``, ``/v1/completions`` with ``logprob_token_ids``), answered by a transformers model
in this process (one full forward per prompt, fp64 log-softmax of its fp32 logits: the numbers do not depend on
how requests are batched or retried), and faults injected at chosen completions requests.

Faults (``StubServer.faults``: {n: kind}, n counting completions requests from 1): ``drop`` (the connection closed
with no answer), ``500``, ``stall`` (no byte for ``stall_s`` seconds, then the answer), ``malformed`` (a body that
is not JSON), ``wrong_ids`` (answers for other token ids), ``model`` (the answer names another model), ``down``
(this and every later request refused: the server went away).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch


class StubServer:
    def __init__(self, model, tokenizer, name: str, *, stall_s: float = 3.0, max_model_len: int = 2048):
        self.model, self.tokenizer, self.name, self.stall_s = model, tokenizer, name, stall_s
        self.max_model_len = max_model_len
        self.faults: dict[int, str] = {}
        self.completions = 0  # completions requests received
        self.prompts = 0  # prompts answered
        self.down = False
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = False  # close() waits for the handlers (a stalled one ends its sleep)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- the model's answers --------------------------------------------------------------------------------
    def logprobs(self, ids: list[int], labels: list[int]) -> dict[str, float]:
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1]
        lp = torch.log_softmax(logits.double(), dim=-1)
        return {f"token_id:{t}": float(lp[t]) for t in labels}

    def completion(self, body: dict, fault: str | None) -> dict:
        labels = list(body["logprob_token_ids"])
        asked = [t + 1 for t in labels] if fault == "wrong_ids" else labels
        choices = [{"index": i, "text": "", "finish_reason": "length",
                    "logprobs": {"tokens": ["token_id:0"], "token_logprobs": [0.0],
                                 "top_logprobs": [self.logprobs(list(p), asked)]}}
                   for i, p in enumerate(body["prompt"])]
        with self.lock:
            self.prompts += len(choices)
        return {"id": "cmpl-stub", "object": "text_completion", "model": "another/model" if fault == "model" else
                self.name, "choices": choices, "usage": {"prompt_tokens": sum(map(len, body["prompt"]))}}

    def _handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, payload) -> None:
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up on a stalled answer
                    self.close_connection = True

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": stub.name, "root": stub.name,
                                                                         "max_model_len": stub.max_model_len}]})
                self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    return self._send(200, {"tokens": stub.tokenizer.encode(
                        body["prompt"], add_special_tokens=body.get("add_special_tokens", True))})
                if self.path != "/v1/completions":
                    return self._send(404, {"error": "not found"})
                with stub.lock:
                    stub.completions += 1
                    fault = stub.faults.get(stub.completions)
                    if fault == "down":
                        stub.down = True
                if stub.down:
                    return self._send(503, {"error": "the server is shutting down"})
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault == "500":
                    return self._send(500, {"error": "internal server error"})
                if fault == "malformed":
                    return self._send(200, b'{"choices": [')
                if fault == "stall":
                    time.sleep(stub.stall_s)
                self._send(200, stub.completion(body, fault))

        return Handler
