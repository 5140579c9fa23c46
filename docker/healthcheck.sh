#!/bin/sh
# The container's health check: `/health/live` of the quarry server in this container, at the
# address it listens on (QUARRY_ADDRESS; an any-address bind is asked on the loopback).
set -eu
addr="${QUARRY_ADDRESS:-127.0.0.1:9000}"
case "$addr" in
    0.0.0.0:* | :* | "[::]:"*) addr="127.0.0.1:${addr##*:}" ;;
esac
exec curl -fsS --max-time 4 -o /dev/null "http://${addr}/health/live"
