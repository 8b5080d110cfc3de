#!/usr/bin/env bash
# What building Sluice needs beyond Rust and gcc: OpenSSL's headers and pkg-config, for librdkafka's
# TLS and SASL SCRAM (rdkafka's `ssl` feature links the system's OpenSSL), and python3 for the
# Kafka TLS/SASL test proxy (integration/lib/kafka_secure_proxy.py; a fresh machine has it).
#
# Executable:   integration/lib/build_deps.sh install    # apt-get when something is missing; idempotent

_BUILD_DEPS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$_BUILD_DEPS_DIR/proc.sh"

ensure_build_deps_installed() {
    if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl 2>/dev/null; then
        return 0
    fi
    proc_apt_install build_deps.sh --no-install-recommends libssl-dev pkg-config || return 1
    pkg-config --exists openssl || { echo "build_deps.sh: openssl still unknown to pkg-config" >&2; return 1; }
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        install) ensure_build_deps_installed ;;
        *) echo "usage: $0 install" >&2; exit 2 ;;
    esac
fi
