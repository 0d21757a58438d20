"""A thin Python client for Hotline's gRPC API (hotline.v1.Hotline), over TLS with an API key
when the server asks for them.

    from hotline_client import Client
    with Client("hotline.example:50051", key=KEY, ca="ca.pem") as c:
        r = c.converse("call-1", "我家停水了")
        print(r["reply"])

Answers are plain dicts (the proto3 JSON mapping with the .proto's field names). Errors are
grpc.RpcError, with .code() (UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND, ...) and .details().
The stubs are generated from proto/ when the package is built (setup.py), or on first import in
a checkout (into hotline_client/_generated, which git ignores).
"""
import sys
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict

_HERE = Path(__file__).resolve().parent
_GENERATED = _HERE / "_generated"

from ._generate import generate  # noqa: E402


def _stubs():
    source = _HERE.parents[2] / "proto" / "hotline" / "v1" / "hotline.proto"
    marker = _GENERATED / "hotline" / "v1" / "hotline_pb2.py"
    if not marker.exists() or (source.exists() and
                               source.stat().st_mtime > marker.stat().st_mtime):
        generate()
    # The generated modules import each other as hotline.v1.*.
    if str(_GENERATED) not in sys.path:
        sys.path.insert(0, str(_GENERATED))
    from hotline.v1 import hotline_pb2, hotline_pb2_grpc
    return hotline_pb2, hotline_pb2_grpc


pb, rpc = _stubs()


def _dict(message):
    # Every field, zero values included (the option's name changed in protobuf 5.26).
    try:
        return MessageToDict(message, preserving_proto_field_name=True,
                             always_print_fields_with_no_presence=True)
    except TypeError:
        return MessageToDict(message, preserving_proto_field_name=True,
                             including_default_value_fields=True)


class Client:
    """One channel to a server. `key`: the API key (sent as authorization: Bearer KEY);
    `ca`: PEM file of the CA to trust (TLS); `cert`/`private_key`: PEM files for mutual TLS."""

    def __init__(self, target="127.0.0.1:50051", key=None, ca=None, cert=None, private_key=None,
                 timeout=30.0):
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {key}"),) if key else ()
        if ca or cert:
            read = lambda p: Path(p).read_bytes() if p else None
            creds = grpc.ssl_channel_credentials(read(ca), read(private_key), read(cert))
            self._channel = grpc.secure_channel(target, creds)
        else:
            self._channel = grpc.insecure_channel(target)
        self._stub = rpc.HotlineStub(self._channel)

    def _call(self, method, request):
        return _dict(getattr(self._stub, method)(request, timeout=self.timeout,
                                                 metadata=self._metadata))

    def understand(self, text, model=""):
        return self._call("Understand", pb.UnderstandRequest(text=text, model=model))

    def models(self):
        return self._call("ListModels", pb.ListModelsRequest())["models"]

    def converse(self, call_id, text):
        return self._call("Converse", pb.ConverseRequest(call_id=call_id, text=text))

    def end_call(self, call_id):
        return self._call("EndCall", pb.EndCallRequest(call_id=call_id))

    def work_order(self, order_id):
        return self._call("GetWorkOrder", pb.GetWorkOrderRequest(id=order_id))

    def work_orders(self, **query):
        """status, department, intent, text, created_from, created_to, limit, offset."""
        return self._call("ListWorkOrders", pb.ListWorkOrdersRequest(**query))["orders"]

    def update_work_order(self, order_id, status="", note=""):
        return self._call("UpdateWorkOrder",
                          pb.UpdateWorkOrderRequest(id=order_id, status=status, note=note))

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Client", "generate", "pb", "rpc"]
