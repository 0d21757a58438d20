"""pip install ./clients/python (from a Hotline checkout): the stubs are generated from proto/
into the package while it is built."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def generate_stubs():
    """Runs hotline_client/_generate.py (loaded by path: the package cannot be imported yet)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "hotline_client_generate", HERE / "hotline_client" / "_generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(HERE / "hotline_client" / "_generated", HERE.parents[1] / "proto")


# The stub packages are listed below, and setuptools checks that listed packages exist while it
# writes the metadata, before build_py runs: a fresh checkout has none, so they are made first.
if not (HERE / "hotline_client" / "_generated" / "hotline" / "v1" / "__init__.py").exists():
    generate_stubs()


class BuildWithStubs(build_py):
    def run(self):
        generate_stubs()  # regenerated so an installed client matches the checkout's proto
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
