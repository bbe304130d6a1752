# Makefile - the one, non-recursive build of bloomd.
# Outputs: build/bloomd (optimised daemon), build/rel/ (optimised objects and benchmarks),
# build/asan/ (everything the tests run, with ASan/UBSan), build/fuzz/ (libFuzzer harnesses).
# `make run` and `make test` install the Debian packages they lack (scripts/deps.sh).

VERSION := 0.1.0
PYTHON := /usr/bin/python3
FUZZ_CC := clang
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 5
PORT ?= 8673
RUN_ARGS ?=

REL := build/rel
ASAN := build/asan
FUZZ := build/fuzz

WARN := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wvla -Wimplicit-fallthrough -Werror
CONV := -Wconversion
CPPFLAGS := -D_GNU_SOURCE -I. -DBLOOMD_VERSION='"$(VERSION)"'
REL_FLAGS := -O2 -g -march=x86-64-v2
ASAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
              -fno-sanitize-recover=undefined
FUZZ_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
              -fno-sanitize-recover=undefined

# Libraries come from pkg-config; `=` defers the lookup until a recipe runs, after
# scripts/deps.sh has installed them.
LIB_LIBS = $(shell pkg-config --libs libxxhash) -lm
PROTO_LIBS =
SERVER_LIBS = $(shell pkg-config --libs libevent libevent_pthreads inih libxxhash) -lpthread -lm
TEST_LIBS = $(shell pkg-config --libs cmocka)
PKG_CFLAGS = $(shell pkg-config --cflags libevent libxxhash inih)

LIB_SRC := $(wildcard lib/*.c)
PROTO_SRC := $(wildcard proto/*.c)
SERVER_SRC := $(filter-out server/main.c,$(wildcard server/*.c))
ALL_SRC := $(LIB_SRC) $(PROTO_SRC) $(SERVER_SRC) server/main.c

objs = $(patsubst %.c,$(1)/%.o,$(2))

# Unit tests: tests/unit/<layer>/test_<module>.c. The folder is the layer and decides what a
# test links: lib/ tests link lib only, proto/ tests proto only, server/ tests everything
# but main.c. So a lib test can never pull in libevent by accident.
UNIT_LIB_SRC := $(wildcard tests/unit/lib/test_*.c)
UNIT_PROTO_SRC := $(wildcard tests/unit/proto/test_*.c)
UNIT_SERVER_SRC := $(wildcard tests/unit/server/test_*.c)
UNIT_LIB := $(patsubst tests/unit/lib/%.c,$(ASAN)/tests/%,$(UNIT_LIB_SRC))
UNIT_PROTO := $(patsubst tests/unit/proto/%.c,$(ASAN)/tests/%,$(UNIT_PROTO_SRC))
UNIT_SERVER := $(patsubst tests/unit/server/%.c,$(ASAN)/tests/%,$(UNIT_SERVER_SRC))
UNIT_TESTS := $(UNIT_LIB) $(UNIT_PROTO) $(UNIT_SERVER)

# Fuzzers: tests/fuzz/fuzz_<name>.c, seed corpus in tests/fuzz/corpus/<name>/.
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS := $(patsubst tests/fuzz/%.c,$(FUZZ)/%,$(FUZZ_SRC))

# Benchmarks: bench/*.c, each linked with lib and proto.
BENCH_SRC := $(wildcard bench/*.c)
BENCHES := $(patsubst bench/%.c,$(REL)/bench/%,$(BENCH_SRC))

FORMAT_SRC := $(wildcard lib/*.[ch] proto/*.[ch] server/*.[ch] tests/unit/*/*.[ch] \
                         tests/fuzz/*.[ch] bench/*.[ch])

DEPS_BUILD := build/.deps-build
DEPS_TEST := build/.deps-test
DEPS_BENCH := build/.deps-bench

.PHONY: all run test unit integration fuzz fuzz-smoke format format-check bench bench-lib \
        bench-proto bench-net bench-snapshot docker-test clean
.DEFAULT_GOAL := all

all: build/bloomd $(BENCHES)

run: build/bloomd
	mkdir -p data
	build/bloomd --bind 127.0.0.1 --port $(PORT) --data-dir data $(RUN_ARGS)

$(DEPS_BUILD): scripts/deps.sh
	@mkdir -p $(@D)
	scripts/deps.sh build
	@touch $@
$(DEPS_TEST): scripts/deps.sh
	@mkdir -p $(@D)
	scripts/deps.sh test
	@touch $@
$(DEPS_BENCH): scripts/deps.sh
	@mkdir -p $(@D)
	scripts/deps.sh bench
	@touch $@

# ---- compiling ----
$(REL)/%.o: %.c | $(DEPS_BUILD)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(WARN) $(EXTRA) $(REL_FLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@
$(ASAN)/%.o: %.c | $(DEPS_TEST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(WARN) $(EXTRA) $(ASAN_FLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@
$(FUZZ)/%.o: %.c | $(DEPS_TEST)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(WARN) $(EXTRA) $(FUZZ_FLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@

# -Wconversion where the arithmetic is the product: lib/ and proto/.
$(REL)/lib/%.o $(ASAN)/lib/%.o $(FUZZ)/lib/%.o: EXTRA := $(CONV)
$(REL)/proto/%.o $(ASAN)/proto/%.o $(FUZZ)/proto/%.o: EXTRA := $(CONV)

# ---- linking ----
build/bloomd: $(call objs,$(REL),$(ALL_SRC))
	$(CC) $(REL_FLAGS) $^ $(SERVER_LIBS) -o $@

$(ASAN)/bloomd: $(call objs,$(ASAN),$(ALL_SRC))
	$(CC) $(ASAN_FLAGS) $^ $(SERVER_LIBS) -o $@

$(UNIT_LIB): $(ASAN)/tests/%: $(ASAN)/tests/unit/lib/%.o $(call objs,$(ASAN),$(LIB_SRC))
	$(CC) $(ASAN_FLAGS) $^ $(LIB_LIBS) $(TEST_LIBS) -o $@
$(UNIT_PROTO): $(ASAN)/tests/%: $(ASAN)/tests/unit/proto/%.o $(call objs,$(ASAN),$(PROTO_SRC))
	$(CC) $(ASAN_FLAGS) $^ $(PROTO_LIBS) $(TEST_LIBS) -o $@
$(UNIT_SERVER): $(ASAN)/tests/%: $(ASAN)/tests/unit/server/%.o \
                $(call objs,$(ASAN),$(LIB_SRC) $(PROTO_SRC) $(SERVER_SRC))
	$(CC) $(ASAN_FLAGS) $^ $(SERVER_LIBS) $(TEST_LIBS) -o $@

$(FUZZERS): $(FUZZ)/%: $(FUZZ)/tests/fuzz/%.o $(call objs,$(FUZZ),$(LIB_SRC) $(PROTO_SRC))
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $^ $(LIB_LIBS) -o $@

$(BENCHES): $(REL)/bench/%: $(REL)/bench/%.o $(call objs,$(REL),$(LIB_SRC) $(PROTO_SRC))
	$(CC) $(REL_FLAGS) $^ $(SERVER_LIBS) -o $@
# The journal bench measures a server module: it links that one object too.
$(REL)/bench/bench_journal: $(REL)/server/journal.o

# ---- tests ----
# `make test`: format check, unit tests, integration tests, a short run of every fuzzer.
test: format-check unit integration fuzz-smoke
	@echo "make test: all passed"

export UBSAN_OPTIONS := halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS := detect_leaks=1:abort_on_error=1

unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; $$t; done

integration: $(ASAN)/bloomd $(REL)/bench/loadgen | $(DEPS_TEST)
	BLOOMD_BIN=$(CURDIR)/$(ASAN)/bloomd $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration
	LOADGEN=$(CURDIR)/$(REL)/bench/loadgen PYTHONPATH=$(CURDIR)/clients/python/src \
	    $(PYTHON) -m pytest -q -p no:cacheprovider bench/test_loadgen.py docker/test_click_worker.py
	@if [ -d clients/python/tests ]; then \
	    BLOOMD_BIN=$(CURDIR)/$(ASAN)/bloomd PYTHONPATH=$(CURDIR)/clients/python/src \
	    $(PYTHON) -m pytest -q -p no:cacheprovider clients/python/tests; fi

# Each fuzzer: its seed corpus plus FUZZ_SMOKE_SECONDS (test) or FUZZ_SECONDS (fuzz) of
# new inputs; the working corpus lives under build/ so the tree stays clean.
fuzz-run = set -e; for f in $(FUZZERS); do n=$$(basename $$f); \
	mkdir -p $(FUZZ)/corpus/$$n tests/fuzz/corpus/$$n; echo "== $$n ($(1)s)"; \
	if ! $$f -max_total_time=$(1) -max_len=65536 $(FUZZ)/corpus/$$n tests/fuzz/corpus/$$n \
	    >$(FUZZ)/$$n.log 2>&1; then tail -n 60 $(FUZZ)/$$n.log; exit 1; fi; \
	tail -n 1 $(FUZZ)/$$n.log; done
fuzz-smoke: $(FUZZERS)
	@$(call fuzz-run,$(FUZZ_SMOKE_SECONDS))
fuzz: $(FUZZERS)
	@$(call fuzz-run,$(FUZZ_SECONDS))

format:
	clang-format -i $(FORMAT_SRC)
format-check: | $(DEPS_TEST)
	clang-format --dry-run --Werror $(FORMAT_SRC)

# ---- benchmarks ----
bench: bench-lib bench-proto bench-net bench-snapshot
bench-lib: $(REL)/bench/bench_lib
	$(REL)/bench/bench_lib
bench-proto: $(REL)/bench/bench_proto
	$(REL)/bench/bench_proto
bench-net: build/bloomd $(BENCHES) | $(DEPS_BENCH)
	bench/run_net.sh
bench-snapshot: build/bloomd $(BENCHES) | $(DEPS_BENCH)
	bench/run_snapshot.sh

docker-test:
	scripts/deps.sh docker
	docker/test.sh

clean:
	rm -rf build

-include $(shell find $(REL) $(ASAN) $(FUZZ) -name '*.d' 2>/dev/null)
