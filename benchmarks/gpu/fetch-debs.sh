#!/bin/sh
# fetch-debs.sh - download, on a Debian 12 machine with its package
# mirror, the package files that check.sh unpacks on a GPU machine that
# has CUDA, CMake and ninja but none of dpl's other build dependencies
# (Criterion, cJSON, OpenBLAS, OpenSSL's headers, pkg-config) and no
# network. Nothing is installed here.
#
#   benchmarks/gpu/fetch-debs.sh [DIR]     (default: benchmarks/gpu/debs)
#
# DIR is ignored by git; carry it beside the tree to the GPU machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/debs}
# The libraries dpl builds against, their run-time libraries, and the
# libraries those need that a CUDA image need not have.
pkgs="libcriterion-dev libcriterion3 libnanomsg5 libgit2-1.5
libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1
libcjson-dev libcjson1
libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev
libgfortran5
libssl-dev libssl3
pkgconf-bin libpkgconf3"
mkdir -p "$dir"
cd "$dir"
# apt-get download writes into the current folder; _apt may not write
# here, which only costs a warning.
# shellcheck disable=SC2086
apt-get download $pkgs
n=$(ls ./*.deb | wc -l)
echo "fetch-debs: $n package files in $dir ($(du -sh . | cut -f1))"
