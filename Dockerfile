# Osprey in a container: the binary on a slim Debian, run as a non-root
# user, with the index in the /data volume.
#
#   docker build -t osprey .
#   docker run -d --name osprey -p 50001:50001 -v osprey-db:/data \
#     -v /var/lib/bitcoind:/bitcoin:ro \
#     -e OSPREY_DAEMON_DIR=/bitcoin -e OSPREY_DAEMON_RPC_ADDR=host.docker.internal:8332 \
#     --add-host host.docker.internal:host-gateway osprey
#
# The node's RPC must accept the container's address (rpcbind/rpcallowip
# in bitcoin.conf). Other networks: add -e OSPREY_NETWORK=signet and
# publish that network's port (-e OSPREY_ELECTRUM_RPC_ADDR=0.0.0.0:60601).
# Not built in CI: see the README.

# The builder: Rust and clang (bindgen and RocksDB's C++). The first build
# compiles RocksDB from source, 20-30 minutes on 2 cores.
FROM rust:1-bookworm AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends clang libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p osprey \
    && install -m 0755 target/release/osprey /usr/local/bin/osprey

# The runtime: only the binary (RocksDB and zstd are linked in statically;
# libstdc++ comes with the base image).
FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin osprey \
    && install -d -o osprey -g osprey -m 0750 /data
COPY --from=builder /usr/local/bin/osprey /usr/local/bin/osprey
USER osprey
WORKDIR /data
VOLUME ["/data"]
# The index in the volume; wallets connect from outside the container.
ENV OSPREY_DB_DIR=/data/db \
    OSPREY_ELECTRUM_RPC_ADDR=0.0.0.0:50001 \
    NO_COLOR=1
# Electrum ports: bitcoin, testnet, testnet4, signet, regtest.
EXPOSE 50001 60001 40001 60601 60401
# docker stop sends SIGTERM; give it time (docker stop -t 300) to close
# the index cleanly.
STOPSIGNAL SIGTERM
ENTRYPOINT ["osprey", "serve"]
