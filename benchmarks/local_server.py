"""An ASGI app under uvicorn on a free port of 127.0.0.1, in a thread of this process (benchmarks.serve,
benchmarks.http_client)."""

from __future__ import annotations

import socket
import threading
import time


class Server:
    """uvicorn on a free port of 127.0.0.1, in a thread."""

    def __init__(self, app):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{s.getsockname()[1]}"
        port = int(self.url.rsplit(":", 1)[1])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)
