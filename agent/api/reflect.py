"""Server reflection under both names, `grpc.reflection.v1alpha` and `grpc.reflection.v1`, on grpclib.

Answers as grpcio-reflection does: a file with all its dependencies, NOT_FOUND in an error response for
an unknown name, INVALID_ARGUMENT for a request with nothing set. The v1 messages are identical on the
wire to v1alpha's (same fields, same numbers), so both services use grpcio-reflection's v1alpha messages
(importing them loads no grpc core).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection_pb2 as rpb
from grpclib.const import Cardinality

from agent.api.rpc import Call, Method, Status

V1ALPHA_SERVICE_NAME = "grpc.reflection.v1alpha.ServerReflection"
V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_POOL = descriptor_pool.Default()


class ReflectionService:
    def __init__(self, services: tuple[str, ...]) -> None:
        self._names = tuple(sorted((*services, V1ALPHA_SERVICE_NAME, V1_SERVICE_NAME)))

    async def info(self, requests: AsyncIterator[rpb.ServerReflectionRequest], call: Call
                   ) -> AsyncIterator[rpb.ServerReflectionResponse]:
        async for request in requests:
            yield self.answer(request)

    def answer(self, request: rpb.ServerReflectionRequest) -> rpb.ServerReflectionResponse:
        kind = request.WhichOneof("message_request") if hasattr(request, "WhichOneof") else None
        try:
            if kind == "list_services":
                return rpb.ServerReflectionResponse(
                    original_request=request, list_services_response=rpb.ListServiceResponse(
                        service=[rpb.ServiceResponse(name=n) for n in self._names]))
            if kind == "file_by_filename":
                return _files(request, _POOL.FindFileByName(request.file_by_filename))
            if kind == "file_containing_symbol":
                return _files(request, _POOL.FindFileContainingSymbol(request.file_containing_symbol))
            if kind == "file_containing_extension":
                ext = request.file_containing_extension
                message = _POOL.FindMessageTypeByName(ext.containing_type)
                extension = _POOL.FindExtensionByNumber(message, ext.extension_number)
                return _files(request, _POOL.FindFileContainingSymbol(extension.full_name))
            if kind == "all_extension_numbers_of_type":
                message = _POOL.FindMessageTypeByName(request.all_extension_numbers_of_type)
                numbers = sorted(e.number for e in _POOL.FindAllExtensions(message))
                return rpb.ServerReflectionResponse(
                    original_request=request, all_extension_numbers_response=rpb.ExtensionNumberResponse(
                        base_type_name=message.full_name, extension_number=numbers))
        except KeyError:
            return _error(request, Status.NOT_FOUND)
        return _error(request, Status.INVALID_ARGUMENT)

    def methods(self) -> dict[str, Method]:
        return {"ServerReflectionInfo": Method(self.info, Cardinality.STREAM_STREAM,
                                               rpb.ServerReflectionRequest, rpb.ServerReflectionResponse)}


def _files(request: rpb.ServerReflectionRequest, file: FileDescriptor) -> rpb.ServerReflectionResponse:
    seen: dict[str, FileDescriptor] = {}
    todo = [file]
    while todo:
        f = todo.pop()
        if f.name not in seen:
            seen[f.name] = f
            todo.extend(f.dependencies)
    protos = []
    for f in seen.values():
        proto = descriptor_pb2.FileDescriptorProto()
        f.CopyToProto(proto)
        protos.append(proto.SerializeToString())
    return rpb.ServerReflectionResponse(
        original_request=request,
        file_descriptor_response=rpb.FileDescriptorResponse(file_descriptor_proto=protos))


def _error(request: rpb.ServerReflectionRequest, status: Status) -> rpb.ServerReflectionResponse:
    error = rpb.ErrorResponse(error_code=status.value, error_message=status.name.lower().replace("_", " "))
    if not isinstance(request, rpb.ServerReflectionRequest):  # a request that did not parse
        return rpb.ServerReflectionResponse(error_response=error)
    return rpb.ServerReflectionResponse(original_request=request, error_response=error)
