"""pip install ./clients/python (from a Hotline checkout): the stubs are generated from proto/
into the package while it is built."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithStubs(build_py):
    def run(self):
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "hotline_client_generate", HERE / "hotline_client" / "_generate.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.generate(HERE / "hotline_client" / "_generated", HERE.parents[1] / "proto")
        super().run()


setup(
    name="hotline-client",
    version="0.1.0",
    description="Python client for the Hotline gRPC API",
    packages=["hotline_client", "hotline_client._generated", "hotline_client._generated.hotline",
              "hotline_client._generated.hotline.v1"],
    install_requires=["grpcio>=1.51", "protobuf>=4.21"],
    setup_requires=["grpcio-tools>=1.51"],
    cmdclass={"build_py": BuildWithStubs},
)
