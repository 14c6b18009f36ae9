# Sourced by scripts/test-deb.sh, test-deb-upgrade.sh and
# test-arm64-chroot.sh: a bookworm made from a rootfs tarball
# (scripts/bookworm-rootfs.sh), and a script run in it.

# unpack_rootfs TARBALL ROOT: the tarball unpacked into ROOT (made).
unpack_rootfs() {
  mkdir -p "$2"
  tar -C "$2" -xzf "$1"
}

# run_in_chroot SECONDS ROOT SCRIPT [ARG...]: bash runs /root/SCRIPT in
# ROOT, for at most SECONDS, in a mount namespace of its own: /proc
# (osprey finds osprey-tools through /proc/self/exe) and /dev go away
# with it, even on failure. The network is the host's.
run_in_chroot() {
  local seconds=$1 root=$2 script=$3
  shift 3
  # shellcheck disable=SC2016 # expanded by the inner bash, from its arguments
  timeout "$seconds" unshare --mount --propagation private bash -c \
    'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" /bin/bash "$@"' \
    "$root" "/root/$script" "$@"
}

# free_port: a TCP port free on 127.0.0.1 now.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
