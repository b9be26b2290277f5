#!/usr/bin/env bash
# Fetch, on a machine with package-index access, the wheels the GPU machine lacks
# (Python 3.12, manylinux x86-64) into .whl/ (git-ignored), so that the suite installs
# them there with --no-index.  xgboost-cpu rather than the CUDA xgboost wheel: the
# native reference runs on the CPU cores and the CUDA wheel alone is over the 64 MiB a
# call may carry.  Then the product's own runtime dependencies that the GPU machine's
# torch, pandas and scikit-learn do not bring (the CLI's, the row filters', the job
# report's plot and GPU samples).  Versions: the ones this project is tested with.
# WHEEL_PYTHON and DEST fetch the same set for another Python into another folder: the
# rehearsal in make test installs it as the GPU machine does, into a Python 3.11 venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="${DEST:-.whl}"
mkdir -p "$dest"
wheels=(
  xgboost-cpu==3.2.0 lightgbm==4.7.0 hummingbird-ml==0.4.12 onnxconverter-common==1.16.0
  dill==0.4.1 skops==0.16.0 prettytable==3.18.0 wcwidth==0.9.4 sqlalchemy==2.1.9
  greenlet pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0
  typing-inspection==0.4.5 typing-extensions==4.16.0
  sqlglot==30.30.0 typer==0.29.2 shellingham==1.5.4 annotated-doc==0.0.7 rich==15.0.0
  markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 platformdirs==4.14.8 pyyaml==6.0.4
  nvidia-ml-py==13.615.71 matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1
  fonttools==4.68.0 kiwisolver==1.5.1 pillow==13.0.0 pyparsing==3.3.3 packaging==26.4
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version "${WHEEL_PYTHON:-3.12}" --implementation cp "${platforms[@]}" \
  -d "$dest" "${wheels[@]}"
du -sh "$dest"
