# qfold — top-level commands. CMake does the building; this file names the jobs.
#   make          build the library (static + shared) and build/qfold
#   make test     install what is missing, build, run every test (ctest) on the
#                 default engine (oneDNN where it has kernels), then the whole
#                 suite again under ASan + LSan + UBSan on the reference
#                 kernels (test-asan): both engines, each pass checked
#   make check    install what is missing, build, run the inner loop's subset of
#                 the tests (ctest -L check: every layer, about a minute)
#   make demo     install what is missing, build, run qfold on the bundled example
#   make test-asan  the whole suite under AddressSanitizer + UBSan (build-asan/)
#   make fuzz     build the libFuzzer targets with clang (build-fuzz/) and run
#                 each FUZZ_SECONDS (default 60) on the examples and test models
#   make accuracy full-dataset accuracy of the quantizer (not in CI; docs/ACCURACY.md)
#   make placement  `qfold check --target neutron` on the torchvision models and
#                 the examples (not in CI; writes docs/NEUTRON_PLACEMENT.md)
#   make install  install (PREFIX=/usr/local)
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all configure build deps deps-build test check test-asan test-asan-run demo accuracy placement install clean fuzz

all: build

deps-build:
	@scripts/deps.sh --build

deps:
	@scripts/deps.sh

# Configure when the build directory has no build system yet, which is also
# what a failed configure leaves (CMake writes CMakeCache.txt before it fails,
# so a rule on the cache would never run again and every later make would stop
# at "No rule to make target 'Makefile'"). A failed configure removes its cache
# (a wrong compiler or a package found missing stays cached otherwise), so the
# next make starts afresh; once the build system exists, `cmake --build` re-runs
# CMake itself when a CMakeLists.txt changes.
configure:
	@if [ ! -f $(BUILD)/Makefile ] && [ ! -f $(BUILD)/build.ninja ]; then \
		rm -f $(BUILD)/CMakeCache.txt; \
		echo "cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)"; \
		cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) || \
			{ rm -rf $(BUILD)/CMakeCache.txt $(BUILD)/CMakeFiles; \
			  echo "configure failed: fix the cause and run make again (it configures afresh)" >&2; exit 1; }; \
	fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The reference processes (PyTorch) keep the memory they free: glibc's
# allocator otherwise hands every large tensor back to the system after each
# step and faults fresh pages in for the next, which on VMs that charge a host
# fault per fresh page made the torch side of the tests ~2x slower (the whole
# `make test` 22 min instead of ~12 on a 2-core VM). Speed only: no result
# depends on it; qfold allocates its plans once (and ASan replaces malloc).
#
# QF_REF_CACHE: the reference results (PyTorch, ONNX Runtime) computed once
# per `make test`, not once per pass: they do not depend on qfold's build, so
# both passes share one cache (tests/ref/refcache.py: entries keyed by the
# call, its arguments and the package versions, and checked against every
# file and module the computation read; a changed input recomputes). `make
# test` starts it empty; a lone `ctest` (no variable) caches nothing.
REF_CACHE ?= $(abspath $(BUILD))/ref-cache
TEST_ENV = MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296 QF_REF_CACHE=$(REF_CACHE)
# A cache miss is computed by a fork server that imported PyTorch once
# (tests/ref/refserver.py, for the duration of the ctest it runs), not by
# the test's process, which would import it itself (~2 CPU s; the first
# pass has ~150 such processes). The results are the same, byte for byte.
REF_SERVER = /usr/bin/python3 $(abspath tests/ref/refserver.py) --

test: deps
	$(MAKE) build
	rm -rf $(REF_CACHE)
	cd $(BUILD) && $(TEST_ENV) $(REF_SERVER) ctest --output-on-failure -j $(JOBS)
	$(MAKE) test-asan-run

# The tests labelled `check` (tests/CMakeLists.txt, QF_CHECK_TESTS): a
# developer's inner loop, on the default engine only (no sanitizer pass).
# The reference cache is kept between runs (its entries are checked against
# what they read, so a changed input recomputes): the torch side is computed
# once, not on every check.
check: deps
	$(MAKE) build
	cd $(BUILD) && $(TEST_ENV) $(REF_SERVER) ctest --output-on-failure -L check -j $(JOBS)

test-asan: deps
	$(MAKE) test-asan-run

# The whole suite again with AddressSanitizer, LeakSanitizer and UBSan: the
# C tests directly, the CLI tests through the instrumented build/qfold. On the
# reference kernels (QFOLD_ENGINE=ref): they are qfold's own code, which the
# sanitizers check, while oneDNN is not instrumented; the first pass runs the
# oneDNN engine, so `make test` covers both (tests that compare the engines
# still load oneDNN here).
# intercept_tls_get_addr=0: with oneDNN loaded (dlopen), LeakSanitizer's
# tracking of dynamic TLS (GCC 12's runtime, glibc 2.36) hands it a bogus
# range for libgomp's worker threads and the leak check itself crashes
# ("Tracer caught signal 11"); static TLS and the threads' stacks are still
# scanned. oneDNN also runs on one OpenMP thread here (OMP_NUM_THREADS=1),
# which avoids the same crash where the option above does not.
test-asan-run:
	$(MAKE) build BUILD=build-asan CMAKE_FLAGS="-DQF_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"
	cd build-asan && $(TEST_ENV) QFOLD_ENGINE=ref OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0 \
		UBSAN_OPTIONS=print_stacktrace=1 $(REF_SERVER) ctest --output-on-failure -j $(JOBS)

demo: deps
	$(MAKE) build
	examples/demo.sh $(BUILD)/qfold

accuracy: deps
	$(MAKE) build
	scripts/accuracy.sh $(BUILD)/qfold

# The torchvision models go through the reference cache (built once, then
# reused while their inputs are unchanged); the table is committed.
placement: deps
	$(MAKE) build
	QF_REF_CACHE=$(REF_CACHE) /usr/bin/python3 tests/target/placement_sweep.py $(BUILD)/qfold \
		--work $(abspath $(BUILD))/placement --out docs/NEUTRON_PLACEMENT.md

FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_JOBS=$(JOBS) sh fuzz/run.sh $(CURDIR) $(CURDIR)/build-fuzz $(FUZZ_SECONDS) fuzz/seeds examples tests $(BUILD)/tests/work

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
