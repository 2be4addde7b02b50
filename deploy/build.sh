#!/bin/sh
# The opsgate environment exactly as uv.lock pins it: the one build both the Dockerfile's build
# stage and tests/e2e/deploy/test_build_script.py run (the test outside a container, in a scratch
# folder), so what the test proves is what the image holds.
#
#   deploy/build.sh SOURCE PREFIX
#
# SOURCE is the repository (pyproject.toml, uv.lock, the packages); PREFIX becomes a virtual
# environment holding opsgate and its dependencies at the versions and hashes of uv.lock
# (--locked: a lock that no longer matches pyproject.toml is refused, never re-resolved), without
# the dev extra, opsgate itself installed as a wheel (not a link to SOURCE) carrying its package
# data: migrations, plan templates, policies, the runbooks of docs/runbooks. The environment's
# scripts name PREFIX's python by its absolute path: copy PREFIX to the same path (the
# Dockerfile's final stage does). UV (default: uv) and PYTHON (default: python3) name the tools.
set -eu

if [ "$#" -ne 2 ]; then
  echo "usage: deploy/build.sh SOURCE PREFIX" >&2
  exit 2
fi
source_dir=$1
prefix=$2
uv=${UV:-uv}
python=${PYTHON:-python3}

UV_PROJECT_ENVIRONMENT=$prefix "$uv" sync --project "$source_dir" --locked --no-dev \
  --no-editable --compile-bytecode --python "$python" --quiet

prefix=$(cd "$prefix" && pwd)

# What a first deploy needs from the wheel, checked where it was installed (from PREFIX, so no
# source tree in the working directory stands in for it).
cd "$prefix"
"$prefix/bin/python" - <<'CHECK'
from core.domain.plan_templates import template_names
from core.library.runbooks import runbooks_folder
import core, pathlib, sys

installed = pathlib.Path(core.__file__).resolve().parent
if pathlib.Path(sys.prefix).resolve() not in installed.parents:
    sys.exit(f"deploy/build.sh: opsgate is not installed in the environment ({installed})")
runbooks = sorted(runbooks_folder("docs/runbooks").glob("*.md"))
if not runbooks:
    sys.exit("deploy/build.sh: the wheel carries no runbooks (docs/runbooks)")
if not template_names():
    sys.exit("deploy/build.sh: the wheel carries no plan templates")
CHECK
"$prefix/bin/opsgate" --help >/dev/null
echo "deploy/build.sh: opsgate environment ready in $prefix"
