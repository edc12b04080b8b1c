"""Server reflection under both names: `grpc.reflection.v1alpha` and `grpc.reflection.v1`.

grpcio-reflection ships only the v1alpha service; the v1 messages are identical on the wire (same fields,
same numbers), so the v1 service name is served by the same servicer with the v1alpha messages.
"""

from __future__ import annotations

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"


def enable_reflection(server: grpc.aio.Server, services: tuple[str, ...]) -> None:
    names = (*services, reflection.SERVICE_NAME, V1_SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    servicer = reflection.aio.ReflectionServicer(names)  # type: ignore[attr-defined]
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString),
    }),))
