# qfold — top-level commands. CMake does the building; this file names the jobs.
#   make          build the library (static + shared) and build/qfold
#   make test     install what is missing, build, run every test (ctest), then
#                 the whole suite again under ASan + LSan + UBSan (test-asan)
#   make demo     install what is missing, build, run qfold on the bundled example
#   make test-asan  the whole suite under AddressSanitizer + UBSan (build-asan/)
#   make accuracy full-dataset accuracy of the quantizer (not in CI; docs/ACCURACY.md)
#   make install  install (PREFIX=/usr/local)
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build deps deps-build test test-asan test-asan-run demo accuracy install clean

all: build

deps-build:
	@scripts/deps.sh --build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) test-asan-run

test-asan: deps
	$(MAKE) test-asan-run

# The whole suite again with AddressSanitizer, LeakSanitizer and UBSan: the
# C tests directly, the CLI tests through the instrumented build/qfold.
# oneDNN runs on one OpenMP thread here: LeakSanitizer's tracer (GCC 12's
# libsanitizer, glibc 2.36) crashes at exit on the dynamic TLS that the
# dlopen'ed libdnnl leaves in libgomp's worker threads ("Tracer caught
# signal 11"), failing every process that ran a oneDNN primitive.
test-asan-run:
	$(MAKE) build BUILD=build-asan CMAKE_FLAGS="-DQF_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"
	cd build-asan && OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS)

demo: deps
	$(MAKE) build
	examples/demo.sh $(BUILD)/qfold

accuracy: deps
	$(MAKE) build
	scripts/accuracy.sh $(BUILD)/qfold

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan
