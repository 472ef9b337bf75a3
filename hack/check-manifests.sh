#!/usr/bin/env bash
# Render every kustomization with `kubectl kustomize`, validate each object against the
# Kubernetes 1.30-1.37 schemas (kubernetes-validate, strict) and run our own checks
# (handler names, quantities, selectors, references). Fails loudly on the first class of error.
#
# Usage: hack/check-manifests.sh   (needs kubectl with kustomize, python3; installs
#        kubernetes-validate with pip when missing)
set -euo pipefail
source "$(dirname "$0")/lib.sh" # for --help
cd "$(dirname "$0")/.."

command -v kubectl >/dev/null || { echo "error: kubectl (with kustomize) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is required" >&2; exit 1; }
if ! python3 -c 'import kubernetes_validate, yaml' 2>/dev/null; then
    echo "installing kubernetes-validate (and PyYAML) with pip" >&2
    python3 -m pip install --quiet kubernetes-validate PyYAML
fi

python3 hack/check_manifests.py --self-test
exec python3 hack/check_manifests.py "$@"
