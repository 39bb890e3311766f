# ftcc: build, test, demo, bench, install. `make help` lists the targets.

CC ?= cc
CXX ?= c++
CFLAGS ?= -O3 -g
CXXFLAGS ?= -O3 -g
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
B ?= build

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
	-Wvla -Wcast-align
override CFLAGS += -std=c11 -D_GNU_SOURCE -pthread -fPIC $(WARN) -Iinclude -Ilib -MMD -MP

FABRIC_SRC := $(wildcard transports/fabric/*.c)
HAVE_FABRIC := $(if $(FABRIC_SRC),$(shell pkg-config --exists libfabric 2>/dev/null && echo 1))
HAVE_URING := $(shell pkg-config --exists liburing 2>/dev/null && echo 1)

LIB_SRC := $(wildcard lib/*.c) transports/tcp.c
LIB_LDLIBS := -lpthread -lm
ifeq ($(HAVE_FABRIC),1)
LIB_SRC += $(FABRIC_SRC)
override CFLAGS += -DFTCC_HAVE_FABRIC=1
LIB_LDLIBS += $(shell pkg-config --libs libfabric)
endif
ifeq ($(HAVE_URING),1)
override CFLAGS += -DFTCC_HAVE_URING=1
LIB_LDLIBS += $(shell pkg-config --libs liburing)
endif

LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
STATIC := $(B)/libftcc.a
SHARED := $(B)/libftcc.so
TOOLS := $(B)/ftcc-run
EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))
TEST_SRC := $(wildcard test/test_*.c)
TESTS := $(patsubst test/%.c,$(B)/test/%,$(TEST_SRC))

.PHONY: all lib tools examples test demo bench bench-compare bench-recovery campaign install uninstall asan tsan clean deps help
all: lib tools examples $(B)/ftbench $(B)/recovery_bench

lib: $(STATIC) $(SHARED)
tools: $(TOOLS)
examples: $(EXAMPLES)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -DFTCC_BUILD -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-z,defs -Wl,-soname,libftcc.so.0 -o $@ $^ $(LIB_LDLIBS) $(LDFLAGS)
	ln -sf libftcc.so $(B)/libftcc.so.0

$(B)/ftcc-run: tools/ftcc-run.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(B)/examples/%: examples/%.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(STATIC) $(LIB_LDLIBS) $(LDFLAGS)

$(B)/ftbench: bench/ftbench.c bench/bench_common.h $(STATIC)
	$(CC) $(CFLAGS) -o $@ $< $(STATIC) $(LIB_LDLIBS) $(LDFLAGS)

$(B)/recovery_bench: bench/recovery_bench.c $(STATIC)
	$(CC) $(CFLAGS) -o $@ $< $(STATIC) $(LIB_LDLIBS) $(LDFLAGS)

# Peer drivers for the comparison (built only by bench-compare).
$(B)/gloo_bench: bench/gloo_bench.cc bench/bench_common.h
	$(CXX) $(CXXFLAGS) -std=c++17 -Wall -Wextra -o $@ $< -lgloo -lpthread
$(B)/mpi_bench: bench/mpi_bench.c bench/bench_common.h
	mpicc.openmpi $(CFLAGS) -o $@ $<

$(B)/test/%: test/%.c $(STATIC) test/testutil.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes -o $@ $< $(STATIC) $(LIB_LDLIBS) -lcriterion $(LDFLAGS)

deps:
	@scripts/deps.sh

# Every test binary runs under a deadline; a hang is a failure.
test: deps
	$(MAKE) all $(TESTS)
	@scripts/run-tests.sh $(B) $(TESTS)

demo: deps
	$(MAKE) all
	@scripts/demo.sh $(B)

bench: all
	@scripts/bench.sh $(B)

bench-compare: all $(B)/gloo_bench $(B)/mpi_bench
	@scripts/bench-compare.sh $(B)

# The longer fault campaign: FTCC_SHRINK_TRIALS random outside kills per
# (ranks, count) pair, n = 3..8, over TCP and libfabric tcp;ofi_rxm.
campaign: all $(B)/test/test_shrink
	FTCC_SHRINK_TRIALS=$${FTCC_SHRINK_TRIALS:-10} $(B)/test/test_shrink --filter 'shrink/random_outside_kill'
	FTCC_SHRINK_TRIALS=$${FTCC_SHRINK_TRIALS:-10} FTCC_TEST_TRANSPORT=fabric FI_PROVIDER='tcp;ofi_rxm' \
		$(B)/test/test_shrink --filter 'shrink/random_outside_kill'

# Failure detection and recovery times; shrink-policy overhead against abort.
bench-recovery: all
	@scripts/bench-recovery.sh $(B)

asan:
	$(MAKE) B=build-asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=address,undefined" test

tsan:
	$(MAKE) B=build-tsan CFLAGS="-O1 -g -fsanitize=thread" LDFLAGS="-fsanitize=thread" test

install: lib tools
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 644 include/ftcc.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/libftcc.so.0
	ln -sf libftcc.so.0 $(DESTDIR)$(LIBDIR)/libftcc.so
	install -m 755 $(B)/ftcc-run $(DESTDIR)$(BINDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@LIBS@|$(LIB_LDLIBS)|' ftcc.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/ftcc.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libftcc.* $(DESTDIR)$(LIBDIR)/pkgconfig/ftcc.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/ftcc.h $(DESTDIR)$(BINDIR)/ftcc-run

clean:
	rm -rf build build-asan build-tsan

help:
	@echo "make [all] | test | demo | bench | bench-compare | install PREFIX=... | asan | tsan | clean"

-include $(LIB_OBJ:.o=.d)
