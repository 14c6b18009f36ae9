#!/usr/bin/env bash
# Installs what building and testing Osprey needs on a fresh Debian/Ubuntu
# machine: clang/libclang (bindgen for RocksDB, which is compiled from
# source), OpenSSL's headers (the tests' TLS client), systemd-analyze (the
# unit's test), HAProxy (the PROXY protocol's test) and, with --btcd, the regtest nodes the tests run: btcd, and
# Bitcoin Core's shared libraries for the bitcoind in ../shared/peers (or
# any bitcoind named by BITCOIND_EXE or on the PATH).
set -euo pipefail

need_apt=()
command -v clang >/dev/null 2>&1 || need_apt+=(clang)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
# OpenSSL's headers: the tests' Electrum client (electrum-client) speaks TLS
# through OpenSSL; Osprey itself uses rustls.
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || need_apt+=(libssl-dev)
# systemd-analyze: a test verifies contrib/osprey.service with it.
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# HAProxy: a test puts Debian's in front of Osprey, sending PROXY headers
# (it is in /usr/sbin, which may not be on a user's PATH).
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust from your distribution or rustup first" >&2
  exit 1
fi

if [ "${1:-}" = "--btcd" ]; then
  export PATH="$PATH:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
  if ! command -v btcd >/dev/null 2>&1; then
    command -v go >/dev/null 2>&1 || { echo "setup: go is needed to install btcd (apt-get install golang)" >&2; exit 1; }
    echo "setup: installing btcd v0.24.2 (go install)"
    (cd /tmp && GOFLAGS=-mod=mod go install github.com/btcsuite/btcd@v0.24.2)
  fi
  # Bitcoin Core: the tests use $BITCOIND_EXE, the PATH, then
  # ../shared/peers/bin/bitcoind, whose libraries its setup.sh installs.
  if [ -z "${BITCOIND_EXE:-}" ] && ! command -v bitcoind >/dev/null 2>&1 && [ -x ../shared/peers/setup.sh ]; then
    echo "setup: preparing ../shared/peers (Bitcoin Core's libraries)"
    ../shared/peers/setup.sh >/dev/null
  fi
fi
