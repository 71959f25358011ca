#!/bin/sh
# Build both fuzz targets with clang and run each for a bounded time.
#   fuzz/run.sh SOURCE_DIR FUZZ_BUILD_DIR SECONDS SEED_DIR...
# SEED_DIRs are searched for small .onnx and .npy files (the examples, the
# models the tests write, fuzz/seeds/: reproducers of earlier findings); each target runs SECONDS on a scratch corpus of
# copies, so the seeds are never modified. Exit 0: both built and ran clean;
# 77: clang or libFuzzer is not installed (ctest's skip); anything else: a
# build failure or a finding (its reproducer under FUZZ_BUILD_DIR/findings/).
set -eu
src=$1
out=$2
secs=$3
shift 3

if ! command -v clang >/dev/null 2>&1 || ! command -v clang++ >/dev/null 2>&1; then
    echo "SKIP: clang / clang++ not installed (Debian: apt-get install clang)"
    exit 77
fi
mkdir -p "$out"
# libFuzzer's runtime is a separate package on some systems (libclang-rt-*-dev).
probe="$out/probe"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$probe.c"
if ! clang -fsanitize=fuzzer "$probe.c" -o "$probe" >/dev/null 2>&1; then
    echo "SKIP: clang cannot link libFuzzer (-fsanitize=fuzzer)"
    exit 77
fi

# The documented build (fuzz/README.md). Configured once; later runs rebuild
# only what changed.
if [ ! -f "$out/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$out" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DQF_FUZZ=ON \
        -DQF_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
        -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" >"$out/configure.log" 2>&1 || {
        cat "$out/configure.log"
        rm -f "$out/CMakeCache.txt"
        exit 1
    }
fi
cmake --build "$out" -j "${FUZZ_JOBS:-2}" --target fuzz_onnx fuzz_npy

rm -rf "$out/corpus"
mkdir -p "$out/corpus/onnx" "$out/corpus/npy" "$out/findings"
for d in "$@"; do
    [ -d "$d" ] || continue
    find "$d" -name '*.onnx' -size -64k -type f | while read -r f; do
        cp "$f" "$out/corpus/onnx/$(printf '%s' "$f" | cksum | cut -d' ' -f1).onnx"
    done
    find "$d" -name '*.npy' -size -16k -type f | while read -r f; do
        cp "$f" "$out/corpus/npy/$(printf '%s' "$f" | cksum | cut -d' ' -f1).npy"
    done
done
echo "corpus: $(ls "$out/corpus/onnx" | wc -l) onnx, $(ls "$out/corpus/npy" | wc -l) npy files"

# With oneDNN loaded (dlopen), LeakSanitizer's tracking of dynamic TLS
# crashes at exit ("Tracer caught signal 11") unless told not to intercept
# __tls_get_addr, as in `make test-asan` (see the Makefile); one OpenMP thread.
ASAN_OPTIONS=${ASAN_OPTIONS:-intercept_tls_get_addr=0}
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# qfold's reference kernels, the code the sanitizers check (oneDNN is not
# instrumented, and its prepared state hid a NULL + 0 in the plan that the
# reference engine hits on every model without prepared state).
QFOLD_ENGINE=${QFOLD_ENGINE:-ref}
export ASAN_OPTIONS OMP_NUM_THREADS QFOLD_ENGINE

# No -fork: the first crash, leak, sanitizer report or timeout ends the run
# with a non-zero status, which fails the test.
"$out/fuzz_onnx" -max_total_time="$secs" -max_len=65536 -timeout=20 -rss_limit_mb=3072 \
    -dict="$src/fuzz/onnx.dict" -artifact_prefix="$out/findings/" -print_final_stats=1 "$out/corpus/onnx"
"$out/fuzz_npy" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/findings/" -print_final_stats=1 "$out/corpus/npy"
