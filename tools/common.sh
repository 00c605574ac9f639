# Shared by tools/run-main.sh and tools/run-tests.sh: install what is missing,
# then configure and build a CMake preset. Safe to run again: it only does
# what is not done yet.
set -euo pipefail

SIGMA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SIGMA_ROOT"
# ccache: paths relative to the checkout, so a fresh clone elsewhere still
# hits what an earlier build cached.
export CCACHE_BASEDIR="$SIGMA_ROOT" CCACHE_NOHASHDIR=1

# Debian 12 packages the build needs: every part of the default preset
# (libtorch for the trainer, pybind11 for the Python module, the text), so
# either command, in either order, configures the whole build.
SIGMA_PACKAGES=(cmake ninja-build g++ ccache pkg-config libgtest-dev libgmock-dev
                libbenchmark-dev nlohmann-json3-dev libcli11-dev libgloo-dev libhiredis-dev redis-server
                libyaml-cpp-dev libxxhash-dev libtbb-dev libflatbuffers-dev flatbuffers-compiler
                libzstd-dev python3 libplplot-dev libcpp-httplib-dev libsodium-dev
                libtorch-dev libopenblas0-pthread bible-kjv pybind11-dev python3-dev python3-torch)

sigma_ensure_packages() {
  local missing=()
  for p in "${SIGMA_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "These Debian packages are missing; install them as root and run this again:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "Installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

# Configures and builds a preset. The configure runs every time (seconds):
# a build folder configured by an earlier checkout keeps the preset's
# variables as they are now (its flags, its required parts), and one that
# found a package missing looks again. Parallel jobs follow the core count.
sigma_build() {
  local preset=$1
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
}
