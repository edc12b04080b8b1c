"""A fake kubelet: `GET /pods` answers a v1 PodList from a fixture file; with `token` set, a request
without `Authorization: Bearer <token>` gets 401 as from the real kubelet's authn filter."""

from __future__ import annotations

from pathlib import Path

from kit.fakes.httpserver import Answer, FakeHttpServer, Recorded


class FakeKubelet(FakeHttpServer):
    def __init__(
        self, podlist: Path, *, token: str | None = None, tls: tuple[str, str] | None = None
    ) -> None:
        super().__init__(tls=tls)
        self.token = token
        self.body = podlist.read_bytes()

    def serve(self, podlist: Path) -> None:
        self.body = podlist.read_bytes()

    def route(self, rec: Recorded) -> Answer:
        if self.token is not None and rec.headers.get("authorization") != f"Bearer {self.token}":
            return Answer(401, b"Unauthorized", "text/plain; charset=utf-8")
        if rec.method != "GET":
            return Answer(405, b"Method Not Allowed", "text/plain")
        if rec.path.rstrip("/") == "/pods":
            return Answer(200, self.body)
        return Answer(404, b"404 page not found\n", "text/plain; charset=utf-8")
