#!/usr/bin/env bash
# TLS material for tests, made once the same way for every crate's tests: a CA, an unrelated CA
# (for "wrong CA" refusals), and a server certificate for 127.0.0.1 and localhost signed by the
# first (EC P-256, valid two days), with the openssl CLI.
#
# Executable:   integration/lib/tls.sh certs DIR    # writes ca.pem, other-ca.pem, server.pem,
#                                                  # server.key (and their keys) into DIR;
#                                                  # prints TLS_DIR=DIR
set -euo pipefail

tls_certs() {
    local dir="${1:?tls_certs DIR}" ca
    mkdir -p "$dir"
    cd "$dir"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    for ca in ca other-ca; do
        openssl req -x509 "${ec[@]}" -keyout "$ca.key" -out "$ca.pem" -days 2 -subj "/CN=sluice test $ca" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    done
    openssl req "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >ext.cnf
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
        -extfile ext.cnf 2>/dev/null
    echo "TLS_DIR=$dir"
}

case "${1:-}" in
    certs) shift; tls_certs "$@" ;;
    *) echo "usage: $0 certs DIR" >&2; exit 2 ;;
esac
