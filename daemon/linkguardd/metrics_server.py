"""The /metrics HTTP endpoint, on a thread of its own.

The families read from the daemon's state are collected on the event loop (no locking: the
loop is the only thread that changes that state), asked for from this thread. The heartbeat age
is computed here, at scrape time, so a scrape still answers when the event loop is stuck: after
LOOP_ANSWER_S without the loop it answers with the build info and a heartbeat age that shows
how long the loop has been gone, which is what the LinkguardHeartbeatStale alert watches.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import logging
import threading

from prometheus_client.exposition import choose_encoder

from linkguardd.metrics import Metrics, encode, eof

log = logging.getLogger(__name__)

# Well inside Prometheus' default scrape timeout (10 s), long enough for a busy loop.
LOOP_ANSWER_S = 2.0
_READ_TIMEOUT_S = 10.0  # a scraper sends its request at once; a silent client is dropped
_START_TIMEOUT_S = 10.0
_LANDING = (b"<html><head><title>linkguardd</title></head><body><h1>linkguardd</h1>"
            b'<p><a href="/metrics">Metrics</a></p></body></html>\n')


class MetricsError(RuntimeError):
    """The /metrics endpoint could not start."""


def parse_address(address: str) -> tuple[str | None, int]:
    """"host:port", "[v6]:port" or ":port" (all interfaces) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or None, int(port)


class MetricsServer:
    """`await start()` / `await stop()` from the event loop whose state `metrics` reads; serves
    GET /metrics (and a landing page at /) from its own thread."""

    def __init__(self, metrics: Metrics, address: str,
                 loop_answer_s: float = LOOP_ANSWER_S) -> None:
        self.metrics = metrics
        self.host, self.port = parse_address(address)
        self.loop_answer_s = loop_answer_s
        self._state_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        """Listen; MetricsError says which address failed (e.g. the port is taken)."""
        self._state_loop = asyncio.get_running_loop()
        self._loop = asyncio.new_event_loop()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True,
                                        name="metrics-http")
        self._thread.start()
        try:
            await asyncio.wait_for(asyncio.wrap_future(started), _START_TIMEOUT_S)
        except OSError as exc:
            self._join()
            raise MetricsError(
                f"cannot serve /metrics on {self.host or '*'}:{self.port}: {exc.strerror or exc}"
                " (set metrics_address, or empty to disable)") from exc
        log.info("metrics: serving http://%s:%d/metrics", self.host or "*", self.port)

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port))
        except OSError as exc:
            started.set_exception(exc)
            self._loop.close()
            return
        self.port = self._server.sockets[0].getsockname()[1]  # the real one when 0 was asked
        started.set_result(None)
        self._loop.run_forever()
        self._loop.close()

    async def stop(self) -> None:
        if self._loop is None or self._server is None:
            return
        server, loop = self._server, self._loop
        self._server = None

        async def close() -> None:
            server.close()
            await server.wait_closed()
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join(_START_TIMEOUT_S)
            self._thread = None

    # --- on the server's thread ---------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            status, headers, body = await self._respond(head.decode("latin-1"))
            lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()),
                     f"Content-Length: {len(body)}", "Connection: close", "", ""]
            writer.write("\r\n".join(lines).encode("latin-1"))
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # the client went away or never sent a request: nothing to answer
        finally:
            writer.close()

    async def _respond(self, head: str) -> tuple[str, dict[str, str], bytes]:
        request_line, *header_lines = head.split("\r\n")
        parts = request_line.split(" ")
        headers = {}
        for line in header_lines:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", {"Allow": "GET, HEAD"}, b"only GET and HEAD\n"
        path = parts[1].split("?", 1)[0]
        if path == "/":
            return "200 OK", {"Content-Type": "text/html; charset=utf-8"}, _LANDING
        if path != "/metrics":
            return "404 Not Found", {"Content-Type": "text/plain"}, b"try /metrics\n"
        try:
            body, content_type = await self._scrape(headers.get("accept"))
        except Exception as exc:  # a bug in a collector must not kill the server: say it
            log.exception("metrics: scrape failed")
            return "500 Internal Server Error", {"Content-Type": "text/plain"}, \
                f"scrape failed: {exc}\n".encode()
        out = {"Content-Type": content_type}
        if "gzip" in headers.get("accept-encoding", ""):
            body = gzip.compress(body, compresslevel=1)  # Prometheus asks for gzip
            out["Content-Encoding"] = "gzip"
        return "200 OK", out, body

    async def _scrape(self, accept: str | None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept or "")
        here = encode(self.metrics.thread_families(), encoder)  # before waiting for the loop
        assert self._state_loop is not None
        asked = asyncio.run_coroutine_threadsafe(self.metrics.render_loop_part(encoder),
                                                 self._state_loop)
        try:
            there = await asyncio.wait_for(asyncio.wrap_future(asked), self.loop_answer_s)
        except TimeoutError:
            asked.cancel()
            log.warning("metrics: the event loop did not answer within %g s; served the "
                        "heartbeat age only", self.loop_answer_s)
            there = b""
        return here + there + eof(content_type), content_type
