#!/usr/bin/env bash
# usage: consumer_test.sh BUILD_DIR SKELETON_SOURCE_DIR WORK_DIR
# Installs into a scratch prefix, then builds against it only: the vendor
# skeleton (find_package), a C program (pkg-config), a C++ program
# (find_package) and, where built, a Python program (the sigma module),
# and runs each.
set -euo pipefail
build=$1 skeleton=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/sigma/hal.h include/sigma/hal_support.h include/sigma/cpu_kernels.h lib/libsigma_cpu_kernels.a \
         include/sigma/hal.hpp include/sigma/sigma.h include/sigma/parallel.hpp \
         include/sigma/planner.hpp bin/sigma-hal-conformance bin/sigma-plan \
         lib/cmake/sigma/sigmaConfig.cmake lib/cmake/sigma_hal/sigma_halConfig.cmake lib/pkgconfig/sigma.pc \
         lib/sigma/plugins/libsigma_hal_skeleton.so; do
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
# It asked for sigma_hal (the HAL ABI's version), and links no libsigma.
if readelf -d "$plugin" | grep NEEDED | grep -q libsigma; then
  echo "the skeleton links libsigma"; exit 1
fi

# pkg-config sees the package too.
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs sigma | grep -q -- "-lsigma"

# The installed suite finds the installed plugins by short name, and passes
# the freshly built one by path.
"$prefix/bin/sigma-hal-conformance" --plugin skeleton --quiet
"$prefix/bin/sigma-hal-conformance" --plugin "$plugin" --quiet
# A C program with pkg-config only, and a C++ one with find_package only,
# built with the sanitizers the package was (an instrumented libsigma needs
# its runtime first in the program).
consumers=$(cd "$(dirname "$0")/consumers" && pwd)
sanitize=$(sed -n 's/^SIGMA_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
case "$sanitize" in
  address) san_flags="-fsanitize=address,undefined" ;;
  thread) san_flags="-fsanitize=thread" ;;
  *) san_flags="" ;;
esac
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror $san_flags "$consumers/c_consumer.c" -o "$work/c_consumer" $(pkg-config --cflags --libs sigma) \
  -Wl,-rpath,"$prefix/lib"
"$work/c_consumer"
cmake -S "$consumers/cxx" -B "$work/cxx-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_BUILD_RPATH="$prefix/lib" -DCMAKE_CXX_FLAGS="$san_flags" \
  > "$work/cxx-configure.log"
cmake --build "$work/cxx-build" > "$work/cxx-build.log"
"$work/cxx-build/cxx_consumer"
# The Python module, where this build has it (Release, pybind11 found):
# imported from the prefix only, with Debian's interpreter.
if compgen -G "$build/python/sigma/_sigma*.so" > /dev/null; then
  compgen -G "$prefix/lib/python3/dist-packages/sigma/_sigma*.so" > /dev/null ||
    { echo "missing after install: the sigma Python module"; exit 1; }
  (cd "$work" && PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$prefix/lib/python3/dist-packages" \
    /usr/bin/python3 "$consumers/py_consumer.py" "$prefix")
fi
echo "install consumer: ok"
