"""`grpc.health.v1.Health`, as grpcio-health-checking's servicer answers it, on grpclib.

Check answers NOT_FOUND for a service never set; Watch sends the current status (SERVICE_UNKNOWN for one
never set) and then every change. After `enter_graceful_shutdown` every service is NOT_SERVING for good.
The messages are grpcio-health-checking's own (importing them loads no grpc core).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from grpc_health.v1 import health_pb2
from grpclib.const import Cardinality

from agent.api.rpc import Call, Method, Status

SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class HealthService:
    def __init__(self) -> None:
        self._status: dict[str, int] = {}
        self._changed = asyncio.Condition()
        self._shutting_down = False

    async def set(self, service: str, status: int) -> None:
        if not self._shutting_down:
            await self._set(service, status)

    async def enter_graceful_shutdown(self) -> None:
        if not self._shutting_down:
            self._shutting_down = True
            for service in list(self._status):
                await self._set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def _set(self, service: str, status: int) -> None:
        async with self._changed:
            self._status[service] = status
            self._changed.notify_all()

    async def check(self, request: health_pb2.HealthCheckRequest, call: Call
                    ) -> health_pb2.HealthCheckResponse:
        status = self._status.get(request.service)
        if status is None:
            await call.abort(Status.NOT_FOUND, f"unknown service {request.service[:100]!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def watch(self, request: health_pb2.HealthCheckRequest, call: Call
                    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        last = None
        while True:
            async with self._changed:
                while (now := self._current(request.service)) == last:
                    await self._changed.wait()
            last = now
            yield health_pb2.HealthCheckResponse(status=now)

    def _current(self, service: str) -> int:
        return int(self._status.get(service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN))

    def methods(self) -> dict[str, Method]:
        return {
            "Check": Method(self.check, Cardinality.UNARY_UNARY, health_pb2.HealthCheckRequest,
                            health_pb2.HealthCheckResponse),
            "Watch": Method(self.watch, Cardinality.UNARY_STREAM, health_pb2.HealthCheckRequest,
                            health_pb2.HealthCheckResponse),
        }
