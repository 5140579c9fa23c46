#!/bin/sh
# The container's health check: `/health/live` of the quarry server in this container, at the
# address it listens on (QUARRY_ADDRESS; an any-address bind is asked on the loopback). When the
# server has a certificate (QUARRY_CERTS_DIR, default ~/.quarry/certs) it speaks HTTPS: the check
# does too, without verifying the certificate (it asks its own process over the loopback, by an
# address the certificate need not name, and sends nothing secret).
set -eu
addr="${QUARRY_ADDRESS:-127.0.0.1:9000}"
case "$addr" in
    0.0.0.0:* | :* | "[::]:"*) addr="127.0.0.1:${addr##*:}" ;;
esac
certs="${QUARRY_CERTS_DIR:-${HOME:-/nonexistent}/.quarry/certs}"
if [ -e "$certs/public.crt" ]; then
    exec curl -fsS --insecure --max-time 4 -o /dev/null "https://${addr}/health/live"
fi
exec curl -fsS --max-time 4 -o /dev/null "http://${addr}/health/live"
