#!/usr/bin/env bash
# Prepares .gpu-bundle/: the build dependencies that a GPU machine of this project lacks (it has no
# Debian dev packages and no network), as Debian 12 packages fetched here with `apt-get download`
# and unpacked with `dpkg -x` into .gpu-bundle/prefix. The device run carries `.gpu-bundle` with the
# working tree and scripts/gpu-check.sh builds against it (CMAKE_PREFIX_PATH). Ignored by git: a
# generated folder, no third-party source in the repository.
#
#   bash scripts/gpu-bundle.sh          # here, before a device run (needs apt's package lists)
#
# What it holds and why (the top-level CMakeLists.txt's find_package calls):
#   fmt (libfmt-dev + libfmt9)  headers, CMake config, libfmt.so.9: Debian ships no static libfmt,
#                               so the shared one travels; the build tree's RPATH finds it
#   nlohmann-json, CLI11        header-only, CMake configs
#   OpenSSL (libssl-dev)        headers and the static libcrypto.a (byteps uses only libcrypto's
#                               HMAC-SHA256 and RAND_bytes for the job secret, src/protocol/auth.cc);
#                               static, so nothing depends on the GPU machine's libcrypto.so.3
#   GTest/GMock                 headers, static libraries, CMake config
#   pybind11-dev, ninja-build   fallbacks only: the GPU machine's pip pybind11 and ninja come first
# Re-running it with the same package versions only checks (no download: .gpu-bundle-cache/ keeps
# the .deb files, and it is not carried).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${GPU_BUNDLE:-$PWD/.gpu-bundle}
CACHE=${GPU_BUNDLE_CACHE:-$PWD/.gpu-bundle-cache}
ARCH=x86_64-linux-gnu
PKGS=(libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libssl-dev libgtest-dev libgmock-dev pybind11-dev
      ninja-build)
LIMIT_MIB=32  # the working tree with everything it carries must stay under 64 MiB
LAYOUT="# layout 3: package version deb-sha256, unpacked into prefix/ by scripts/gpu-bundle.sh"  # bump on a change below

[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] || {
  echo "gpu-bundle: this needs a Debian amd64 machine (dpkg, apt-get): the GPU machine is x86-64" >&2; exit 1; }
mkdir -p "$CACHE"

# The exact versions apt would install; the .debs are fetched once per version.
versions() { apt-cache policy "${PKGS[@]}" | awk '/^[^ ]/ {p=$1; sub(":$","",p)} /Candidate:/ {print p, $2}'; }
want=$(versions)
if [ "$(echo "$want" | grep -cv '(none)')" -ne ${#PKGS[@]} ]; then
  echo "gpu-bundle: apt knows no candidate for some packages; running apt-get update"
  apt-get update -qq
  want=$(versions)
fi
missing=$(echo "$want" | awk '$2 == "(none)" {print $1}')
[ -z "$missing" ] || { echo "gpu-bundle: no Debian package named: $missing" >&2; exit 1; }

if [ -f "$BUNDLE/manifest.txt" ] && [ "$(head -1 "$BUNDLE/manifest.txt")" = "$LAYOUT" ] &&
   [ "$(grep -v '^#' "$BUNDLE/manifest.txt" | cut -d' ' -f1,2)" = "$want" ]; then
  echo "gpu-bundle: $BUNDLE is up to date ($(du -sh "$BUNDLE" | cut -f1)): ${PKGS[*]}"
  exit 0
fi

deb_of() { find "$CACHE" -maxdepth 1 -name "${1}_${2//:/%3a}_*.deb" | head -1; }
fetch_all() {  # downloads, in one go, the .debs of $want that the cache lacks
  local fetch=() pkg ver
  while read -r pkg ver; do [ -n "$(deb_of "$pkg" "$ver")" ] || fetch+=("$pkg=$ver"); done <<<"$want"
  [ ${#fetch[@]} -eq 0 ] || (cd "$CACHE" && apt-get -q -o APT::Sandbox::User=root download "${fetch[@]}" >/dev/null)
}
if ! fetch_all; then
  echo "gpu-bundle: apt-get download failed (package lists older than the archive?): apt-get update, then again"
  apt-get update -qq
  want=$(versions)
  fetch_all || { echo "gpu-bundle: apt-get download failed for ${PKGS[*]} (is Debian's archive reachable?)" >&2; exit 1; }
fi
debs=()
while read -r pkg ver; do
  f=$(deb_of "$pkg" "$ver")
  [ -n "$f" ] || { echo "gpu-bundle: apt-get download left no .deb of $pkg $ver in $CACHE" >&2; exit 1; }
  debs+=("$f")
done <<<"$want"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for f in "${debs[@]}"; do dpkg -x "$f" "$stage/x"; done
u=$stage/x/usr
# Keep what a build reads: headers, CMake configs, libraries, ninja. Docs, man pages, sources
# (googletest's /usr/src), editor files and pkg-config files (the build asks CMake, not pkg-config) go.
rm -rf "$u/share/doc" "$u/share/man" "$u/share/bash-completion" "$u/share/emacs" "$u/share/vim" \
       "$u/share/zsh" "$u/share/doc-base" "$u/src" "$u/share/pkgconfig" "$u/lib/$ARCH/pkgconfig"
# OpenSSL's per-architecture headers (configuration.h, opensslconf.h) live in include/$ARCH, which
# only the system's compiler searches: merge them into include/openssl.
if [ -d "$u/include/$ARCH/openssl" ]; then
  cp -a "$u/include/$ARCH/openssl/." "$u/include/openssl/"
  rm -rf "${u:?}/include/$ARCH"
fi
# byteps links libcrypto only (find_package(OpenSSL COMPONENTS Crypto)): libssl.a stays out.
rm -f "$u/lib/$ARCH/libssl.a"
# libcrypto.so/libssl.so point at the runtime package, which is not bundled: the static archive
# is what CMake must find.
find "$u" -xtype l -print -delete | sed "s|^$u/|gpu-bundle: dropped the dangling link usr/|"

rm -rf "$BUNDLE.new"
mkdir -p "$BUNDLE.new"
mv "$stage/x" "$BUNDLE.new/prefix"
{
  echo "$LAYOUT"
  i=0
  while read -r pkg ver; do
    echo "$pkg $ver $(sha256sum "${debs[$i]}" | cut -d' ' -f1)"
    i=$((i + 1))
  done <<<"$want"
} >"$BUNDLE.new/manifest.txt"
rm -rf "$BUNDLE"
mv "$BUNDLE.new" "$BUNDLE"

size_kib=$(du -sk "$BUNDLE" | cut -f1)
echo "gpu-bundle: $BUNDLE: $((size_kib / 1024)) MiB ($size_kib KiB) from ${#PKGS[@]} packages:"
grep -v '^#' "$BUNDLE/manifest.txt" | cut -d' ' -f1,2 | sed 's/^/  /'
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu-bundle: over the ${LIMIT_MIB} MiB this script allows (the device run carries at most 64 MiB)" >&2
  exit 1
fi
