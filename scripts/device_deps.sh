#!/usr/bin/env bash
# Sourced by the device scripts (from the repository root, with log, OUT and JOBS set): sets
# prefix_arg to the CMake arguments that find the build dependencies (fmt, GoogleTest, CLI11,
# nlohmann_json): none when the system has them; otherwise -DCMAKE_PREFIX_PATH of a prefix built
# from .devdeps/ (the Debian packages' files, copied along with the tree: .devdeps/debs/*.deb or
# .devdeps/root/usr), of which only headers and sources are used (fmt header-only, GoogleTest
# built from source), so no binary built on another distribution is linked. Fills .devdeps/debs
# on a machine with Debian's package lists: scripts/device_deps.sh --download.
if [ "${1:-}" = --download ]; then
  mkdir -p .devdeps/debs && cd .devdeps/debs &&
    apt-get download libfmt-dev libcli11-dev nlohmann-json3-dev googletest
  exit $?
fi
probe_system_deps() {
  local dir=/tmp/dcpmla-deps-probe
  rm -rf "$dir" && mkdir -p "$dir"
  cat > "$dir/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(probe LANGUAGES CXX)
find_package(fmt REQUIRED)
find_package(GTest REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
EOF
  cmake -S "$dir" -B "$dir/build" > "$dir/log.txt" 2>&1
}

# Prints the prefix it built from .devdeps.
build_carried_deps() {
  local root=.devdeps/root
  if [ ! -d "$root/usr/include" ] && compgen -G ".devdeps/debs/*.deb" > /dev/null; then
    mkdir -p "$root"
    for f in .devdeps/debs/*.deb; do dpkg-deb -x "$f" "$root"; done
  fi
  [ -d "$root/usr/include/fmt" ] || { echo "missing .devdeps (copy it along with the tree)" >&2; return 1; }
  local prefix=/tmp/dcpmla-deps
  rm -rf "$prefix" && mkdir -p "$prefix/include" "$prefix/lib/cmake/fmt" "$prefix/share/cmake"
  cp -r "$root/usr/include/fmt" "$root/usr/include/CLI" "$root/usr/include/nlohmann" \
    "$prefix/include/"
  cp -r "$root/usr/share/cmake/CLI11" "$root/usr/share/cmake/nlohmann_json" "$prefix/share/cmake/"
  cat > "$prefix/lib/cmake/fmt/fmt-config.cmake" <<'EOF'
# fmt, header-only (FMT_HEADER_ONLY): no compiled library to match this machine's toolchain.
if(NOT TARGET fmt::fmt)
  get_filename_component(_fmt_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_fmt_prefix}/include"
    INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
endif()
set(fmt_FOUND TRUE)
EOF
  if ! { cmake -S "$root/usr/src/googletest" -B /tmp/dcpmla-gtest-build -G Ninja \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON \
            -DCMAKE_INSTALL_PREFIX="$prefix" &&
          cmake --build /tmp/dcpmla-gtest-build -j "$JOBS" &&
          cmake --install /tmp/dcpmla-gtest-build; } > /tmp/dcpmla-gtest.log 2>&1; then
    cat /tmp/dcpmla-gtest.log >&2
    return 1
  fi
  echo "$prefix"
}

prefix_arg=()
if probe_system_deps; then
  log "dependencies: system"
else
  if deps=$(build_carried_deps 2>> "$OUT/build.log"); then
    prefix_arg=("-DCMAKE_PREFIX_PATH=$deps")
    log "dependencies: carried .devdeps -> $deps (fmt header-only, GoogleTest from source)"
  else
    log "FAIL: dependencies missing on the system and no usable .devdeps (see build.log)"
    exit 1
  fi
fi

