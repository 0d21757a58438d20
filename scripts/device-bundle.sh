#!/usr/bin/env bash
# device-bundle.sh ARCHIVE.tar.xz BINARY... : packs binaries built here, with the shared libraries
# they load that a GPU machine does not have (oneDNN, protobuf, gRPC, ...), into one xz archive
# that travels with the working tree. The C runtime, the C++ runtime and the CUDA/driver libraries
# are left out: the GPU machine has its own, newer ones, which a bundled copy would shadow.
#
# The archive holds bin/ (the binaries), lib/ (their libraries) and run: on the GPU machine,
#   mkdir -p /tmp/hl && tar -C /tmp/hl -xJf ARCHIVE.tar.xz && /tmp/hl/run hotline ...
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: device-bundle.sh ARCHIVE.tar.xz BINARY..." >&2
  exit 2
fi
archive=$1; shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/lib"
provided='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libutil\.|libstdc\+\+\.|libgcc_s\.|libcuda\.|libnvidia-|libcudart\.|libcublas\.|libcublasLt\.|libcudnn|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver|libnccl)'
for bin in "$@"; do
  [ -x "$bin" ] || { echo "device-bundle.sh: $bin is not an executable" >&2; exit 2; }
  cp -L "$bin" "$work/bin/"
  while read -r name path; do
    if [ "$path" = "not" ]; then
      echo "device-bundle.sh: $bin needs $name, which this machine lacks" >&2
      exit 2
    fi
    echo "$name" | grep -Eq "$provided" && continue
    [ -f "$work/lib/$name" ] || cp -L "$path" "$work/lib/$name"
  done < <(ldd "$bin" | awk '/=>/ {print $1, $3}')
done
cat > "$work/run" <<'RUN'
#!/usr/bin/env bash
# run NAME ARGS... : a bundled binary with the bundled libraries first on the library path.
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
name=$1; shift
exec "$here/bin/$name" "$@"
RUN
chmod +x "$work/run"
mkdir -p "$(dirname "$archive")"
tar -C "$work" -cf - . | xz -6 -T2 > "$archive"
echo "device-bundle.sh: $(du -h "$archive" | cut -f1) in $archive ($(ls "$work/lib" | wc -l) libraries)"
