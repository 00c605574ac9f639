#!/usr/bin/env bash
# usage: consumer_test.sh BUILD_DIR SKELETON_SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 skeleton=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/sigma/hal.h include/sigma/hal.hpp include/sigma/sigma.h bin/sigma-hal-conformance \
         lib/cmake/sigma/sigmaConfig.cmake lib/pkgconfig/sigma.pc lib/sigma/plugins/libsigma_hal_skeleton.so; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
ls "$prefix"/lib/libsigma.so* > /dev/null

# A user's plugin project, configured against the installed package only.
unset SIGMA_HAL_PLUGIN_PATH
cmake -S "$skeleton" -B "$work/skeleton-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/skeleton-build" > "$work/build.log"
plugin="$work/skeleton-build/libsigma_hal_skeleton.so"
[ -f "$plugin" ] || { echo "the skeleton did not build against the package"; exit 1; }

# pkg-config sees the package too.
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs sigma | grep -q -- "-lsigma"

# The installed suite finds the installed plugins by short name, and passes
# the freshly built one by path.
"$prefix/bin/sigma-hal-conformance" --plugin skeleton --quiet
"$prefix/bin/sigma-hal-conformance" --plugin "$plugin" --quiet
echo "install consumer: ok"
