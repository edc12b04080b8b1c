"""A fake YARN NodeManager web service: `/ws/v1/node[/info]`, `/ws/v1/node/apps`, `/ws/v1/node/containers`
answered from a fixture directory (info.json, apps.json, containers.json)."""

from __future__ import annotations

from pathlib import Path

from kit.fakes.httpserver import Answer, FakeHttpServer, Recorded

ROUTES = {
    "/ws/v1/node": "info.json",
    "/ws/v1/node/info": "info.json",
    "/ws/v1/node/apps": "apps.json",
    "/ws/v1/node/containers": "containers.json",
}


def no_cgroups(rel: str) -> list[str]:
    """The cgroup lister (`NodeManagerSource`'s `children`) of a node with no container cgroups."""
    return []


class FakeNodeManager(FakeHttpServer):
    def __init__(self, fixture_dir: Path, *, tls: tuple[str, str] | None = None) -> None:
        super().__init__(tls=tls)
        self.serve(fixture_dir)

    def serve(self, fixture_dir: Path) -> None:
        self.docs = {route: (fixture_dir / name).read_bytes() for route, name in ROUTES.items()}

    def route(self, rec: Recorded) -> Answer:
        if rec.method != "GET":
            return Answer(405, b"", "text/plain")
        body = self.docs.get(rec.path.split("?", 1)[0].rstrip("/"))
        if body is None:
            return Answer.of_json(
                404,
                {
                    "RemoteException": {
                        "exception": "NotFoundException",
                        "message": f"java.lang.Exception: {rec.path}",
                        "javaClassName": "org.apache.hadoop.yarn.webapp.NotFoundException",
                    }
                },
            )
        return Answer(200, body)
