#!/bin/sh
# Container entry point for `pub0sub hub` (Docker image, docker compose, Kubernetes).
#
# It solves two problems a plain `pub0sub hub` cannot solve inside a container:
#
# 1. Bootstrap without a pre-known peer id.  --bootstrap needs /p2p/<peer id>, and a
#    hub's peer id comes from the identity key it creates in its data dir on first
#    start.  So instead of configuring peer ids, we name the *client* addresses of
#    the hubs to join (PUB0SUB_SEEDS), ask each one for its status document
#    (`pub0sub status --json`, key mesh.listen_addrs) and build the bootstrap
#    multiaddrs from the answers.  The address part is rebuilt from the seed's
#    resolved IP, because a hub listening on 0.0.0.0 reports /ip4/0.0.0.0/...
#
# 2. An address other hubs can dial.  A hub advertises the address it listens on.
#    /ip4/0.0.0.0/... is useless to others, so unless PUB0SUB_HUB_MESH_LISTEN is
#    set we listen on this container's own IP (POD_IP from the Kubernetes downward
#    API, else the IP our hostname resolves to).
#
# Environment (all optional):
#   PUB0SUB_SEEDS        space- or comma-separated HOST:PORT client addresses of hubs
#                        to join; entries naming this host are skipped
#   PUB0SUB_SEED_WAIT    seconds to wait for a seed to answer (default 300); then exit 1
#                        so the supervisor restarts us (a hub alone would stay alone)
#   PUB0SUB_FIRST_SEED   "alone-ok" (default): if this host is the first entry of
#                        PUB0SUB_SEEDS and no other seed answers at once, start alone
#                        (the first hub of a new cluster has nobody to join)
#   PUB0SUB_MESH         "off" runs the hub without the mesh
#   PUB0SUB_MESH_PORT    mesh TCP port when the listen address is derived (default 7421)
#   PUB0SUB_LOG_LEVEL    --log-level (default INFO); not PUB0SUB_HUB_LOG_LEVEL, because the
#                        hub rejects PUB0SUB_HUB_* names that are not hub settings
#   PUB0SUB_HUB_*        hub settings, passed through untouched; an explicit
#                        PUB0SUB_HUB_BOOTSTRAP disables the seed lookup
# Arguments are appended to `pub0sub hub`, so they override everything above.
set -eu

log() { echo "entrypoint: $*" >&2; }

# An empty PUB0SUB_HUB_* variable means "not set" (compose turns an unset ${VAR:-} into
# ""), but the hub would take "" as a value: unset them before anything reads them.
for name in $(env | sed -n 's/^\(PUB0SUB_HUB_[A-Z0-9_]*\)=$/\1/p'); do
    unset "$name"
done

# Resolve a host name to an IPv4 address with Python (always in the image; no extra tools).
resolve() {
    python3 -c 'import socket, sys; print(socket.gethostbyname(sys.argv[1]))' "$1" 2>/dev/null
}

self_host="${HOSTNAME:-$(python3 -c 'import socket; print(socket.gethostname())')}"

# Print "/ip4/<ip>/tcp/<port>/p2p/<id>" for the hub answering at client address $1, or fail.
seed_multiaddr() {
    seed="$1"
    host="${seed%:*}"
    ip="$(resolve "$host")" || return 1
    [ -n "$ip" ] || return 1
    doc="$(pub0sub status --hub "$seed" --json --timeout 3 2>/dev/null)" || return 1
    # From the first /p2p/ address: its TCP port and peer id; the host part is replaced by $ip.
    tail="$(printf '%s' "$doc" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
mesh = doc.get("mesh") or {}
for addr in mesh.get("listen_addrs") or []:
    parts = addr.strip("/").split("/")
    if "p2p" in parts and "tcp" in parts:
        print("tcp/%s/p2p/%s" % (parts[parts.index("tcp") + 1], parts[parts.index("p2p") + 1]))
        break
')" || return 1
    [ -n "$tail" ] || { log "$seed answers but reports no mesh address (mesh off there?)"; return 1; }
    echo "/ip4/$ip/$tail"
}

# --- mesh listen address --------------------------------------------------------------
mesh="${PUB0SUB_MESH:-on}"
if [ "$mesh" != "off" ] && [ -z "${PUB0SUB_HUB_MESH_LISTEN:-}" ]; then
    own_ip="${POD_IP:-$(resolve "$self_host" || true)}"
    if [ -z "$own_ip" ]; then
        log "cannot find this container's IP (set POD_IP or PUB0SUB_HUB_MESH_LISTEN)"
        exit 1
    fi
    PUB0SUB_HUB_MESH_LISTEN="/ip4/$own_ip/tcp/${PUB0SUB_MESH_PORT:-7421}"
    export PUB0SUB_HUB_MESH_LISTEN
fi

# --- bootstrap from seeds -------------------------------------------------------------
seeds="$(printf '%s' "${PUB0SUB_SEEDS:-}" | tr ',' ' ')"
if [ "$mesh" != "off" ] && [ -z "${PUB0SUB_HUB_BOOTSTRAP:-}" ] && [ -n "$seeds" ]; then
    first_seed_host=""
    others=""
    for seed in $seeds; do
        host="${seed%:*}"
        [ -n "$first_seed_host" ] || first_seed_host="$host"
        # "pub0sub-hub-0.pub0sub-hub.ns.svc" names this pod if its first label is our hostname.
        if [ "${host%%.*}" = "$self_host" ] || [ "$host" = "$self_host" ]; then
            continue
        fi
        others="$others $seed"
    done
    i_am_first=no
    [ "${first_seed_host%%.*}" != "$self_host" ] || i_am_first=yes

    wait_s="${PUB0SUB_SEED_WAIT:-300}"
    start="$(date +%s)"
    bootstrap=""
    while :; do
        for seed in $others; do
            if addr="$(seed_multiaddr "$seed")"; then
                log "bootstrap from $seed: $addr"
                bootstrap="${bootstrap:+$bootstrap,}$addr"
            fi
        done
        [ -z "$bootstrap" ] || break
        if [ -z "$others" ] || { [ "$i_am_first" = yes ] && [ "${PUB0SUB_FIRST_SEED:-alone-ok}" = alone-ok ]; }; then
            # The first hub of the list starts alone when nobody answers: on a fresh
            # cluster it is everyone else's bootstrap.  When it restarts while others run,
            # they answer and it bootstraps from them instead.
            log "no other hub answers; starting as the first hub"
            break
        fi
        if [ $(( $(date +%s) - start )) -ge "$wait_s" ]; then
            log "no seed answered within ${wait_s}s (${others# }); exiting so the supervisor retries"
            exit 1
        fi
        sleep 2
    done
    if [ -n "$bootstrap" ]; then
        PUB0SUB_HUB_BOOTSTRAP="$bootstrap"
        export PUB0SUB_HUB_BOOTSTRAP
    fi
fi

# exec: the hub replaces this shell (as PID 1 in a container), so the SIGTERM of
# `docker stop` or the kubelet reaches the hub itself and it shuts down cleanly.
exec pub0sub hub --log-level "${PUB0SUB_LOG_LEVEL:-INFO}" "$@"
