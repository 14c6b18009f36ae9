# Osprey in a container: the binaries on a slim Debian, run as a non-root
# user, with the index in the /data volume.
#
#   docker build -t osprey .
#   docker run -d --name osprey -p 50001:50001 -v osprey-db:/data \
#     -v /var/lib/bitcoind:/bitcoin:ro \
#     -e OSPREY_DAEMON_DIR=/bitcoin -e OSPREY_DAEMON_RPC_ADDR=host.docker.internal:8332 \
#     --add-host host.docker.internal:host-gateway osprey
#   docker ps        # STATUS: (health: starting) until wallets are served
#
# The node's RPC must accept the container's address (rpcbind/rpcallowip
# in bitcoin.conf). Other networks: add -e OSPREY_NETWORK=signet and
# publish that network's port (-e OSPREY_ELECTRUM_RPC_ADDR=0.0.0.0:60601).
# No node? `docker run --rm -p 60401:60401 --entrypoint osprey osprey demo
# --electrum-rpc-addr 0.0.0.0:60401` serves a generated regtest chain.
#
# scripts/test-container.sh builds the runtime stage with podman, from
# binaries built outside (BINARIES) on a debootstrapped bookworm
# (RUNTIME_IMAGE), and runs the demo and the health check in it.

ARG RUNTIME_IMAGE=debian:bookworm-slim
# The stage or image whose /usr/local/bin holds osprey and osprey-tools.
ARG BINARIES=builder

# The builder: Rust and clang (bindgen and RocksDB's C++). The first build
# compiles RocksDB from source, 20-30 minutes on 2 cores.
FROM rust:1-bookworm AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends clang libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p osprey -p osprey-tools \
    && install -m 0755 target/release/osprey target/release/osprey-tools /usr/local/bin/

FROM ${BINARIES} AS binaries

# The runtime: the server and osprey-tools (`osprey demo`'s chain
# generator). RocksDB and zstd are linked in statically; libstdc++ comes
# with the base image.
FROM ${RUNTIME_IMAGE}
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin osprey \
    && install -d -o osprey -g osprey -m 0750 /data
COPY --from=binaries /usr/local/bin/osprey /usr/local/bin/osprey-tools /usr/local/bin/
USER osprey
WORKDIR /data
VOLUME ["/data"]
# The index in the volume; wallets connect from outside the container.
ENV OSPREY_DB_DIR=/data/db \
    OSPREY_ELECTRUM_RPC_ADDR=0.0.0.0:50001 \
    NO_COLOR=1
# Electrum ports: bitcoin, testnet, testnet4, signet, regtest.
EXPOSE 50001 60001 40001 60601 60401
# Healthy means answering: `osprey ping` sends server.ping to
# OSPREY_ELECTRUM_RPC_ADDR (0.0.0.0 is asked on 127.0.0.1). The port opens
# at startup once the node answers, and is answered during the first sync
# too (wallets then get an error with its progress). The start period
# covers a node that takes long to start: until the first answer the
# container is "starting"; after it, three missed pings in a row make it
# "unhealthy".
HEALTHCHECK --interval=60s --timeout=15s --start-period=2h --retries=3 \
    CMD ["osprey", "ping", "--timeout", "10"]
# docker stop sends SIGTERM; give it time (docker stop -t 300) to close
# the index cleanly.
STOPSIGNAL SIGTERM
ENTRYPOINT ["osprey", "serve"]
