#!/usr/bin/env bash
# Builds Osprey's Debian package, osprey_<version>_<arch>.deb, for Debian
# bookworm and Raspberry Pi OS 64-bit:
#
#   scripts/package.sh                  # amd64 (this machine), into target/debian
#   scripts/package.sh --arch arm64     # cross-compiled with Debian's aarch64 toolchain
#   scripts/package.sh --out DIR        # the .deb goes to DIR
#
# It installs what it needs (dpkg-dev, and for arm64 the cross compilers
# and the rustup target), runs `cargo build --release` (a no-op when
# target/ is up to date) and assembles the package with dpkg-deb from the
# files in the repository: contrib/osprey.service (ExecStart moved to
# /usr/bin), contrib/osprey.toml.example as /etc/osprey/osprey.toml, and
# packaging/ (maintainer scripts, copyright, lintian overrides). The first
# arm64 build compiles RocksDB for aarch64: 30+ minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=$(dpkg --print-architecture)
out=target/debian
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--arch amd64|arm64] [--out DIR]" >&2; exit 2 ;;
  esac
done

case "$arch" in
  amd64) triple=x86_64-unknown-linux-gnu; gnu=x86_64-linux-gnu ;;
  arm64) triple=aarch64-unknown-linux-gnu; gnu=aarch64-linux-gnu ;;
  *) echo "package: --arch is amd64 or arm64, not $arch" >&2; exit 2 ;;
esac
host_arch=$(dpkg --print-architecture)

need_apt=()
command -v dpkg-shlibdeps >/dev/null 2>&1 || need_apt+=(dpkg-dev)
if [ "$arch" != "$host_arch" ]; then
  command -v "$gnu-gcc" >/dev/null 2>&1 || need_apt+=("gcc-$gnu")
  command -v "$gnu-g++" >/dev/null 2>&1 || need_apt+=("g++-$gnu")
  [ -e "/usr/$gnu/lib/libc.so.6" ] || need_apt+=("libc6-dev-$arch-cross")
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "package: installing ${need_apt[*]} with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
scripts/setup.sh

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || { echo "package: no workspace version in Cargo.toml" >&2; exit 1; }
# The address the project's commits are made with.
maintainer="Osprey maintainers <maintainers@users.noreply.a-seed-6e4c129b.example>"

# --- Build -----------------------------------------------------------------
target_dir=${CARGO_TARGET_DIR:-target}
bins_dir="$target_dir/release"
strip="strip"
objdump="objdump"
if [ "$arch" != "$host_arch" ]; then
  rustup target add "$triple" >/dev/null
  env_triple=${triple//-/_}
  # cc-rs and the linker: Debian's cross toolchain (the workspace's CC=clang
  # stays the host's compiler, for build scripts). bindgen parses RocksDB's
  # C header with the target's libc headers.
  export "CC_$env_triple=$gnu-gcc" "CXX_$env_triple=$gnu-g++" "AR_$env_triple=$gnu-ar"
  export "CARGO_TARGET_${env_triple^^}_LINKER=$gnu-gcc"
  export "BINDGEN_EXTRA_CLANG_ARGS_$env_triple=--sysroot=/usr/$gnu"
  cargo_target=(--target "$triple")
  bins_dir="$target_dir/$triple/release"
  strip="$gnu-strip"
  objdump="$gnu-objdump"
else
  cargo_target=()
fi
echo "package: cargo build --release ${cargo_target[*]} (osprey $version, $arch)"
cargo build --release --locked "${cargo_target[@]}" -p osprey -p osprey-tools

# --- Assemble --------------------------------------------------------------
stage="target/debian-stage/$arch"
root="$stage/root"
rm -rf "$stage"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/etc/osprey" "$root/usr/share/doc/osprey" "$root/usr/share/lintian/overrides"

for bin in osprey osprey-tools; do
  # What dh_strip removes: debug info, the symbol table, build notes.
  "$strip" --strip-unneeded --remove-section=.comment --remove-section=.note \
    -o "$root/usr/bin/$bin" "$bins_dir/$bin"
  chmod 0755 "$root/usr/bin/$bin"
done

# The unit: contrib's, with its manual-install header replaced and the
# binary where the package puts it.
unit="$root/lib/systemd/system/osprey.service"
{
  echo "# Osprey's systemd unit, from the osprey package. Settings go in"
  echo "# /etc/osprey/osprey.toml; change the unit with \`systemctl edit osprey\`."
  sed -n '/^\[Unit\]/,$p' contrib/osprey.service
} | sed 's|^ExecStart=/usr/local/bin/osprey |ExecStart=/usr/bin/osprey |' >"$unit"
grep -q '^ExecStart=/usr/bin/osprey serve --conf /etc/osprey/osprey.toml$' "$unit" \
  || { echo "package: contrib/osprey.service's ExecStart changed; update package.sh" >&2; exit 1; }
chmod 0644 "$unit"

install -m 0644 contrib/osprey.toml.example "$root/etc/osprey/osprey.toml"
echo /etc/osprey/osprey.toml >"$root/DEBIAN/conffiles"
install -m 0644 packaging/copyright "$root/usr/share/doc/osprey/copyright"
# A native package's changelog.gz is in Debian's format: one entry for
# this version, dated by SOURCE_DATE_EPOCH, else the last commit (the same
# sources give the same package), pointing at the project's CHANGELOG.md,
# shipped beside it.
gzip -9n <CHANGELOG.md >"$root/usr/share/doc/osprey/CHANGELOG.md.gz"
changed=$(date -u -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
printf 'osprey (%s) bookworm; urgency=medium\n\n  * Osprey %s: see CHANGELOG.md.gz in this directory.\n\n -- %s  %s\n' \
  "$version" "$version" "$maintainer" "$changed" | gzip -9n >"$root/usr/share/doc/osprey/changelog.gz"
chmod 0644 "$root"/usr/share/doc/osprey/*.gz
install -m 0644 packaging/lintian-overrides "$root/usr/share/lintian/overrides/osprey"
for script in postinst prerm postrm; do
  install -m 0755 "packaging/$script" "$root/DEBIAN/$script"
done

# Depends: the shared libraries the binaries link (libc, libstdc++,
# libgcc), with the minimum versions their symbols need, from the symbols
# files of the packages that ship them. dpkg-shlibdeps wants a source tree:
# a control file of two stanzas is enough. For arm64 the libraries are the
# cross toolchain's: their shlibs name the arm64 packages (libc6:arm64,
# libgcc-s1-arm64-cross, ...), which are the native names once the
# qualifier and suffix are dropped.
shlibs_dir="$stage/shlibs"
install -d "$shlibs_dir/debian"
printf 'Source: osprey\n\nPackage: osprey\nArchitecture: any\n' >"$shlibs_dir/debian/control"
shlibdeps_args=()
[ "$arch" != "$host_arch" ] && shlibdeps_args=("-l/usr/$gnu/lib")
depends=$(cd "$shlibs_dir" && DEB_HOST_ARCH="$arch" OBJDUMP="$objdump" dpkg-shlibdeps -O \
  "${shlibdeps_args[@]}" "$OLDPWD/$root/usr/bin/osprey" "$OLDPWD/$root/usr/bin/osprey-tools")
depends=${depends#shlibs:Depends=}
depends=${depends//-$arch-cross/}
depends=${depends//:$arch/}
# The cross libstdc++6's shlibs gives no minimum version: take it from the
# newest GLIBCXX_3.4.N the binaries need, mapped to the GCC release that
# added it by this machine's libstdc++6 symbols file (the version nodes
# are the same on every architecture).
if [[ "$depends" =~ libstdc\+\+6(,|$) ]]; then
  node=$("$objdump" -T "$root/usr/bin/osprey" "$root/usr/bin/osprey-tools" \
    | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -uV | tail -1)
  minver=$(sed -n "s/^ $node@$node \([^ ]*\)\$/\1/p" "/var/lib/dpkg/info/libstdc++6:$host_arch.symbols")
  [ -n "$minver" ] || { echo "package: no libstdc++6 version for $node" >&2; exit 1; }
  depends=$(echo "$depends" | sed -E "s/libstdc\+\+6(,|\$)/libstdc++6 (>= $minver)\1/")
fi
case "$depends" in
  *libc6*libstdc++6*|*libstdc++6*libc6*) ;;
  *) echo "package: unexpected shared-library dependencies: $depends" >&2; exit 1 ;;
esac
# postinst makes the user with useradd (passwd is not Essential).
depends="$depends, passwd"

(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) \
  >"$root/DEBIAN/md5sums"
installed_kb=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: osprey
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_kb
Depends: $depends
Section: net
Priority: optional
Description: Electrum server for your own Bitcoin node
 Osprey indexes a Bitcoin node's chain (Bitcoin Core, without txindex,
 or btcd) and serves Electrum wallets such as Sparrow and Electrum from
 that index, so that their addresses never reach anyone else's server.
 .
 This package installs the osprey server and osprey-tools (the demo's
 chain generator and a benchmark client), a systemd unit (not enabled:
 edit /etc/osprey/osprey.toml, then systemctl enable --now osprey) and a
 system user osprey whose index lives in /var/lib/osprey.
EOF

# A release (SOURCE_DATE_EPOCH set, as scripts/release.sh sets it): every
# file dated by it, so that the same sources give the same package bytes
# whenever they are built (dpkg-deb 1.21 dates only the ar members by it).
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
fi
mkdir -p "$out"
deb="$out/osprey_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "package: $deb ($(du -h "$deb" | cut -f1)), Depends: $depends"
