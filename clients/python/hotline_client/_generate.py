"""Generates the Python modules of proto/hotline/v1/hotline.proto (grpc_tools); needs no stubs
itself, so setup.py can run it before the package exists."""
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_GENERATED = _HERE / "_generated"


def generate(out=_GENERATED, proto_dir=None):
    """Generates the Python modules of hotline/v1/hotline.proto into `out` with grpc_tools."""
    from grpc_tools import protoc
    import grpc_tools

    proto_dir = Path(proto_dir or _HERE.parents[2] / "proto")
    source = proto_dir / "hotline" / "v1" / "hotline.proto"
    if not source.exists():
        raise FileNotFoundError(f"{source} not found: build the package from a Hotline checkout")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    include = Path(grpc_tools.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out}",
                      f"--grpc_python_out={out}", str(source)])
    if rc != 0:
        raise RuntimeError(f"protoc failed on {source}")
    for d in [out, out / "hotline", out / "hotline" / "v1"]:
        (d / "__init__.py").touch()
    return out
