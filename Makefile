# ftcc: build, test, demo, bench, install. `make help` lists the targets.
# SPDX-License-Identifier: MIT

CC ?= cc
CXX ?= c++
CFLAGS ?= -O3 -g
CXXFLAGS ?= -O3 -g
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
B ?= build

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
	-Wvla -Wcast-align
PKG_CONFIG ?= pkg-config

# ---- optional parts ------------------------------------------------------------
# Each is detected through pkg-config unless set on the command line
# (HAVE_FABRIC=1 forces it, HAVE_FABRIC= leaves it out). Detection runs every
# time make reads this file: `make test`, `make demo` and `make tsan` run deps
# first and then a fresh $(MAKE), which detects again what deps installed.
# NO_<PART> says why a part is left out; every build prints it.
FABRIC_SRC := $(sort $(wildcard transports/fabric/*.c))
comma := ,
pc_exists = $(shell $(PKG_CONFIG) --exists $(1) 2>/dev/null && echo 1)
pc_found = $(shell command -v $(PKG_CONFIG) 2>/dev/null)
pc_missing = $(if $(pc_found),pkg-config cannot find $(1),$(PKG_CONFIG) is not installed) (install $(if $(pc_found),,pkg-config and )$(2)$(comma) or run make deps)
# $(call detect,PART,pkg-config module,Debian package): HAVE_PART and NO_PART,
# unless HAVE_PART was set on the command line.
define detect
ifeq ($$(origin HAVE_$(1)),undefined)
HAVE_$(1) := $$(call pc_exists,$(2))
NO_$(1) := $$(call pc_missing,$(2),$(3))
else
NO_$(1) := HAVE_$(1)=$$(HAVE_$(1)) was set by hand
endif
endef
$(eval $(call detect,FABRIC,libfabric,libfabric-dev))
$(eval $(call detect,URING,liburing,liburing-dev))
$(eval $(call detect,PMIX,pmix,libpmix-dev))
$(eval $(call detect,ZLIB,zlib,zlib1g-dev))
ifeq ($(FABRIC_SRC),)
HAVE_FABRIC :=
NO_FABRIC := no transports/fabric sources in this tree
endif

# The torch.distributed backend (bindings/torch/): built against Debian's
# PyTorch (python3-torch, libtorch-dev, pybind11-dev; make deps-torch
# installs them, about 800 MB) when its headers and /usr/bin/python3's torch
# are there.
TORCH_PY ?= /usr/bin/python3
ifeq ($(origin HAVE_TORCH),undefined)
HAVE_TORCH := $(shell test -f /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp && \
	test -f /usr/include/pybind11/pybind11.h && $(TORCH_PY) -c 'import torch' >/dev/null 2>&1 && echo 1)
NO_TORCH := the PyTorch of Debian is not installed (python3-torch libtorch-dev pybind11-dev: make deps-torch)
else
NO_TORCH := HAVE_TORCH=$(HAVE_TORCH) was set by hand
endif

# The man pages' converter (lowdown: the man target below).
LOWDOWN := $(shell command -v lowdown 2>/dev/null)
NO_MAN := lowdown is not installed (apt-get install lowdown, or make deps)

# lib/ in rooms by concern (docs/design.md, "Source layout"); every room's headers are on the include path.
ROOMS := lib/core lib/policy lib/membership lib/bootstrap lib/durable lib/util transports
LIB_SRC := $(wildcard lib/*.c $(ROOMS:%=%/*.c) transports/tcp/*.c)
# libcrypto (OpenSSL, libssl-dev): HMAC-SHA256, random bytes, constant-time
# compare for the handshakes and tokens (docs/design.md, "Dependencies"). Required.
CRYPTO_CFLAGS := $(shell $(PKG_CONFIG) --cflags libcrypto 2>/dev/null)
CRYPTO_LIBS := $(or $(shell $(PKG_CONFIG) --libs libcrypto 2>/dev/null),-lcrypto)
LIB_LDLIBS := -lpthread -lm $(CRYPTO_LIBS)
FEATURES := $(CRYPTO_CFLAGS)
ifeq ($(HAVE_FABRIC),1)
LIB_SRC += $(FABRIC_SRC)
FEATURES += -DFTCC_HAVE_FABRIC=1
# libfabric is loaded at run time when a fabric transport opens (dl.c): only its headers here
LIB_LDLIBS += -ldl
FEATURES += $(shell $(PKG_CONFIG) --cflags libfabric)
endif
ifeq ($(HAVE_URING),1)
FEATURES += -DFTCC_HAVE_URING=1
LIB_LDLIBS += $(shell $(PKG_CONFIG) --libs liburing)
endif
ifeq ($(HAVE_PMIX),1)
FEATURES += -DFTCC_HAVE_PMIX=1 $(shell $(PKG_CONFIG) --cflags pmix)
LIB_LDLIBS += $(shell $(PKG_CONFIG) --libs pmix)
endif
# ar keeps one member per file name: two sources with one name would lose one.
ifneq ($(words $(notdir $(LIB_SRC))),$(words $(sort $(notdir $(LIB_SRC)))))
$(error two library sources share a file name (libftcc.a would keep only one): $(LIB_SRC))
endif

# The user's CFLAGS come last, so they can override ours (-std, -W...).
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread -fPIC $(WARN) -Iinclude $(ROOMS:%=-I%) -MMD -MP \
	$(FEATURES) $(CFLAGS)

# $(B)/.flags holds everything that decides what an object or a program is
# made of; it is rewritten only when that changes, and everything built
# depends on it, so a change of flags, compiler or detected parts rebuilds.
FLAGS_TEXT := $(CC) | $(ALL_CFLAGS) | $(LDFLAGS) | $(LIB_LDLIBS) | $(LIB_SRC)
FLAGS := $(B)/.flags

LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
STATIC := $(B)/libftcc.a
SHARED := $(B)/libftcc.so
# The version is ftcc.h's (FTCC_VERSION_*), defined there only.
version_part = $(shell sed -n 's/^\#define FTCC_VERSION_$(1) \([0-9]*\)$$/\1/p' include/ftcc.h)
VERSION := $(call version_part,MAJOR).$(call version_part,MINOR).$(call version_part,PATCH)
SONAME := libftcc.so.$(call version_part,MAJOR)
TOOLS := $(B)/ftcc-run $(B)/ftcc-log $(B)/ftcc-ckpt
EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))
# The recovery experiment's harness (experiments/: make experiment) reads the
# gzipped Fashion-MNIST data set with zlib.
EXPERIMENTS := $(if $(filter 1,$(HAVE_ZLIB)),$(B)/experiments/train_fmnist)
TEST_SRC := $(wildcard test/test_*.c)
TESTS := $(patsubst test/%.c,$(B)/test/%,$(TEST_SRC))
# Programs the tests run: a rank that builds the address book, and the same
# rank with MPI calls (when Open MPI's compiler is installed); a rank that
# forks a child after ft_init (test_fork).
MPICC_OPENMPI := $(shell command -v mpicc.openmpi 2>/dev/null)
TEST_HELPERS := $(B)/test/boot_rank $(if $(MPICC_OPENMPI),$(B)/test/boot_rank_mpi) \
	$(B)/test/fork_rank $(B)/test/tsan_rank $(B)/test/part_rank $(B)/test/grow_rank
# Slurm for the Slurm tests (slurm-test, and their run in make test): the
# controller, the node daemon, srun, and munge for their authentication.
SLURM_PKGS := slurmctld slurmd slurm-client munge

.PHONY: all lib tools docs-env torch deps-torch torch-demo examples test check bench-torch fuzz fuzz-afl fuzz-corpus demo trace-demo experiment bench bench-compare bench-recovery campaign rejoin-campaign cluster-test slurm-test grow-test man install uninstall asan tsan clean deps help FORCE
all: lib tools examples $(EXPERIMENTS) $(B)/ftbench $(B)/recovery_bench $(B)/rejoin_bench \
     $(B)/ckpt_bench $(if $(LOWDOWN),man)

lib: $(STATIC) $(SHARED)
tools: $(TOOLS)
examples: $(EXAMPLES)

# Says what this build leaves out (every time), and rewrites $(FLAGS) only
# when its text changes.
$(FLAGS): FORCE
	@mkdir -p $(B)
	@$(if $(filter 1,$(HAVE_FABRIC)),,echo 'ftcc: building without the libfabric transport: $(NO_FABRIC)')
	@$(if $(filter 1,$(HAVE_URING)),,echo 'ftcc: building without io_uring (logs will use pwrite): $(NO_URING)')
	@$(if $(filter 1,$(HAVE_PMIX)),,echo 'ftcc: building without PMIx (bootstrap "pmix" will fail with FT_ENOSYS): $(NO_PMIX)')
	@$(if $(filter 1,$(HAVE_ZLIB)),,echo 'ftcc: building without experiments/train_fmnist (make experiment): $(NO_ZLIB)')
	@$(if $(filter 1,$(HAVE_TORCH)),,echo 'ftcc: building without the PyTorch backend (bindings/torch): $(NO_TORCH)')
	@$(if $(LOWDOWN),,echo 'ftcc: building without the man pages: $(NO_MAN)')
	@# .new.PID: two makes of one build directory at once (make test's install checks) each their own
	@printf '%s\n' '$(subst ','\'',$(FLAGS_TEXT))' > $(FLAGS).new.$$$$; \
	if cmp -s $(FLAGS).new.$$$$ $(FLAGS); then rm -f $(FLAGS).new.$$$$; else \
		[ ! -f $(FLAGS) ] || echo "ftcc: build flags or detected parts changed: rebuilding $(B)"; \
		mv -f $(FLAGS).new.$$$$ $(FLAGS); fi

$(B)/%.o: %.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fvisibility=hidden -DFTCC_BUILD -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-z,defs -Wl,-soname,$(SONAME) -o $@ $^ $(LIB_LDLIBS) $(LDFLAGS)
	ln -sf libftcc.so $(B)/$(SONAME)

# One link rule for every program: the C sources among its prerequisites, the
# static library (and objects), and what a target adds (PROG_CFLAGS, PROG_LIBS:
# target-specific).
define LINK_PROG
@mkdir -p $(dir $@)
$(CC) $(ALL_CFLAGS) $(PROG_CFLAGS) -o $@ $(filter %.c %.o,$^) $(STATIC) $(LIB_LDLIBS) $(PROG_LIBS) $(LDFLAGS)
endef

# ftcc-run serves the address store: its server, and lib's messages and sockets.
# ftcc-run: the loop (ftcc-run.c) and its parts, by job
RUN_SRC := tools/run_args.c tools/run_env.c tools/run_output.c
$(B)/ftcc-run: tools/ftcc-run.c $(RUN_SRC) tools/ftcc-run.h tools/store_server.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/ftcc-log: tools/ftcc-log.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/ftcc-ckpt: tools/ftcc-ckpt.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/examples/%: examples/%.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/experiments/train_fmnist: PROG_LIBS = -lz
$(B)/experiments/train_fmnist: experiments/train_fmnist.c $(wildcard experiments/*.h) $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/ftbench: bench/ftbench.c bench/bench_common.h $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/recovery_bench: bench/recovery_bench.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/rejoin_bench: bench/rejoin_bench.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/ckpt_bench: bench/ckpt_bench.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

# Peer drivers for the comparison (built only by bench-compare).
$(B)/gloo_bench: bench/gloo_bench.cc bench/bench_common.h
	$(CXX) $(CXXFLAGS) -std=c++17 -Wall -Wextra -o $@ $< -lgloo -lpthread
$(B)/mpi_bench: bench/mpi_bench.c bench/bench_common.h
	mpicc.openmpi $(ALL_CFLAGS) -o $@ $<
$(B)/tcp_ring: bench/tcp_ring.c bench/bench_common.h
	$(CC) $(ALL_CFLAGS) -o $@ $<

# Criterion tests: test/test_*.c (the rank programs beside them link no Criterion)
TEST_PROG_CFLAGS := -Wno-missing-prototypes
$(B)/test/test_%: PROG_CFLAGS = $(TEST_PROG_CFLAGS)
$(B)/test/test_%: PROG_LIBS = -lcriterion
$(B)/test/%: test/%.c $(STATIC) $(FLAGS)
	$(LINK_PROG)
# the Criterion tests' helpers (test/testutil.c), compiled once
$(TESTS): $(B)/test/testutil.o
$(B)/test/testutil.o: test/testutil.c test/testutil.h $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# The store in-process: where its allocations can fail (test/test_store.c), and as
# ftcc-run serves in-band membership (test/test_inband.c).
$(B)/test/test_inband $(B)/test/test_store: PROG_CFLAGS = $(TEST_PROG_CFLAGS) -Itools
$(B)/test/test_store: PROG_LIBS = -lcriterion -Wl,--wrap=malloc,--wrap=free
$(B)/test/test_inband: test/test_inband.c test/served.h tools/store_server.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/test/test_store: test/test_store.c test/served.h tools/store_server.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/test/boot_rank: test/boot_rank.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/test/fork_rank: test/fork_rank.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

$(B)/test/grow_rank: test/grow_rank.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

# The PyTorch backend: $(B)/python/ftcc (PYTHONPATH=$(B)/python; import ftcc.torch).
TORCH_PY_SRC := $(wildcard bindings/torch/ftcc/*.py)
ifeq ($(HAVE_TORCH),1)
TORCH_EXT := $(B)/python/ftcc/_C$(shell $(TORCH_PY) bindings/torch/flags.py suffix 2>/dev/null)
TORCH_PKG := $(TORCH_EXT) $(TORCH_PY_SRC:bindings/torch/%=$(B)/python/%)
$(TORCH_EXT): bindings/torch/ftcc_torch.cpp bindings/torch/flags.py $(STATIC) $(FLAGS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -fPIC -shared -Wall -Wextra -Iinclude \
		$(shell $(TORCH_PY) bindings/torch/flags.py cflags 2>/dev/null) $(CXXFLAGS) -o $@ $< \
		$(STATIC) $(shell $(TORCH_PY) bindings/torch/flags.py libs 2>/dev/null) $(LIB_LDLIBS) $(LDFLAGS)
$(B)/python/ftcc/%.py: bindings/torch/ftcc/%.py
	@mkdir -p $(dir $@)
	cp $< $@
endif
torch: $(TORCH_PKG) $(FLAGS)
	@$(if $(filter 1,$(HAVE_TORCH)),,echo 'ftcc: no PyTorch backend: $(NO_TORCH)')

# The man pages: man/*.md (Markdown) through lowdown (make deps installs it)
# into $(B)/man, with a page that sources its family's for every other name a
# page's NAME line lists (scripts/man.sh). make install puts them under $(MANDIR).
MAN_SRC := $(wildcard man/*.md)
ifneq ($(LOWDOWN),)
man: $(B)/man/.built
# .sources: the list of pages, rewritten when it changes (a page removed rebuilds too)
$(B)/man/.sources: FORCE
	@mkdir -p $(dir $@)
	@echo '$(MAN_SRC)' > $@.$$$$; if cmp -s $@.$$$$ $@; then rm -f $@.$$$$; else mv -f $@.$$$$ $@; fi
$(B)/man/.built: $(MAN_SRC) $(B)/man/.sources $(wildcard docs/environment.md) scripts/man.sh include/ftcc.h
	@scripts/man.sh build $(B)/man $(VERSION)
	@touch $@
else
man:
	@echo 'ftcc: NO MAN PAGES BUILT: $(NO_MAN)'
endif

# The settings reference, docs/environment.md, is ftcc-run's output (the table in
# lib/bootstrap/config.c): regenerate it after changing the table. make test
# fails when the two differ (scripts/check-docs.sh).
docs-env: $(B)/ftcc-run
	$(B)/ftcc-run --params=markdown > docs/environment.md.new && mv docs/environment.md.new docs/environment.md

deps-torch:
	@scripts/deps.sh python3-torch libtorch-dev pybind11-dev python3-pytest

# DDP on Fashion-MNIST (examples/train_ddp.py), 4 ranks: nothing killed, a rank
# SIGKILLed under shrink, the same under rejoin; results side by side, loss curves.
torch-demo: deps deps-torch
	@scripts/deps.sh dataset-fashion-mnist gnuplot-nox
	$(MAKE) all torch
	@scripts/torch-demo.sh $(B)

$(B)/test/boot_rank_mpi: test/boot_rank.c $(STATIC) $(FLAGS)
	@mkdir -p $(dir $@)
	mpicc.openmpi $(ALL_CFLAGS) -DFTCC_TEST_MPI -o $@ $< $(STATIC) $(LIB_LDLIBS) $(LDFLAGS)

# A rank program for make tsan: no Criterion (its runner cannot start under TSan).
$(B)/test/tsan_rank: test/tsan_rank.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

# The cluster test's link-down and partition rank program.
$(B)/test/part_rank: test/cluster/part_rank.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

deps:
	@scripts/deps.sh

# Fuzz harnesses, one per parser a peer or a file reaches (test/fuzz/):
# log (log reader), frame (data link hello, ack, frame header), ctl (control
# link framing and hello), inband (the in-band membership handlers), store
# (the store's join parser, the client's answer parser), memberfile (view and
# member files), ckpt (checkpoint journal). Each builds twice against the
# library compiled with -DFTCC_FUZZ (the internal entry points the harnesses
# use): a replay driver with ASan and UBSan, which make test runs over its
# corpus (test/fuzz/corpus/<name>/), and, by make fuzz, an afl++ persistent
# harness fuzzed for FUZZ_SECONDS (or FUZZ_EXECS executions) each;
# make fuzz-corpus rewrites the log reader's seeds.
FUZZ_NAMES := log frame ctl inband store memberfile ckpt
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(B)/fuzz/fuzz_%_replay)
FUZZ_LIB_SRC := $(LIB_SRC) tools/store_server.c
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_SECONDS ?= 60
FUZZ_EXECS ?=
$(B)/fuzz/san/%.o: %.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fvisibility=hidden -DFTCC_BUILD -DFTCC_FUZZ $(FUZZ_SAN) -c $< -o $@

$(B)/fuzz/libftcc_san.a: $(FUZZ_LIB_SRC:%.c=$(B)/fuzz/san/%.o)
	@rm -f $@
	ar rcs $@ $^

$(B)/fuzz/fuzz_%_replay: test/fuzz/fuzz_%.c test/fuzz/fuzz_main.h $(B)/fuzz/libftcc_san.a $(FLAGS)
	$(CC) $(ALL_CFLAGS) -DFTCC_FUZZ -Itools $(FUZZ_SAN) -o $@ $< $(B)/fuzz/libftcc_san.a \
		$(LIB_LDLIBS) $(LDFLAGS) -fsanitize=address,undefined

# The afl++ builds: FUZZ_AFL_CC is set by scripts/fuzz.sh (afl-clang-fast, ...).
$(B)/fuzz/afl/%.o: %.c $(FLAGS)
	@mkdir -p $(dir $@)
	AFL_QUIET=1 $(FUZZ_AFL_CC) $(ALL_CFLAGS) -fvisibility=hidden -DFTCC_BUILD -DFTCC_FUZZ -c $< -o $@

$(B)/fuzz/libftcc_afl.a: $(FUZZ_LIB_SRC:%.c=$(B)/fuzz/afl/%.o)
	@rm -f $@
	ar rcs $@ $^

$(B)/fuzz/fuzz_%_afl: test/fuzz/fuzz_%.c test/fuzz/fuzz_main.h $(B)/fuzz/libftcc_afl.a $(FLAGS)
	AFL_QUIET=1 $(FUZZ_AFL_CC) $(ALL_CFLAGS) -DFTCC_FUZZ -Itools -o $@ $< $(B)/fuzz/libftcc_afl.a \
		$(LIB_LDLIBS) $(LDFLAGS)

fuzz-afl: $(FUZZ_NAMES:%=$(B)/fuzz/fuzz_%_afl)

$(B)/fuzz/gen_corpus: test/fuzz/gen_corpus.c $(STATIC) $(FLAGS)
	$(LINK_PROG)

fuzz-corpus: $(B)/fuzz/gen_corpus
	$(B)/fuzz/gen_corpus test/fuzz/corpus/log

# FUZZ=name fuzzes that harness only.
fuzz:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_EXECS=$(FUZZ_EXECS) scripts/fuzz.sh $(B) $(FUZZ)

# Every test binary runs under a deadline; a hang is a failure.
test: deps deps-torch
	$(MAKE) all torch $(TESTS) $(TEST_HELPERS) $(FUZZ_REPLAY)
	@scripts/run-tests.sh $(B) $(TESTS)

# The edit loop's subset (a minute or so): unit tests of one process, and
# the parsers' corpora; make test runs everything.
CHECK_TESTS := $(addprefix $(B)/test/,test_config test_reduce test_schedule test_crc32c \
	test_wire test_tcp test_fabric_link test_file test_token test_inband_codec test_inband test_log test_membership \
	test_store test_sock test_fault test_trace)
check:
	$(MAKE) all $(CHECK_TESTS) $(FUZZ_REPLAY)
	@scripts/run-tests.sh --only-units $(B) $(CHECK_TESTS)

demo: deps
	$(MAKE) all
	@scripts/demo.sh $(B)

# The demo's training job traced (FTCC_TRACE), rank 2 killed at 1.5 s, drawn
# to $(B)/trace/job.png; the JSON files open in ui.perfetto.dev too.
trace-demo: deps
	$(MAKE) all
	@rm -rf $(B)/trace && mkdir -p $(B)/trace
	FTCC_POLICY=shrink FTCC_TRACE=$(B)/trace/job.json $(B)/ftcc-run -n 4 --timeout 300 \
		--kill 2@1.5 --ignore-killed $(B)/examples/train 400 5
	scripts/trace-plot.py -o $(B)/trace/job.png '$(B)/trace/job.*.json'

# The recovery experiment: Fashion-MNIST, 4 ranks, real outside kills, the
# papers' recovery tables; build/experiment/results.md and PNG plots.
# About 10 minutes; EXPERIMENT_FULL=1 for more seeds, steps and cells.
experiment: deps
	@scripts/deps.sh dataset-fashion-mnist zlib1g-dev gnuplot-nox python3
	$(MAKE) all
	@scripts/experiment.sh $(B)

bench: all
	@scripts/bench.sh $(B)

# torch.distributed through ftcc against PyTorch's Gloo, and the binding against C.
bench-torch: all torch
	@scripts/bench-torch.sh $(B)

bench-compare: all $(B)/gloo_bench $(B)/mpi_bench $(B)/tcp_ring
	@scripts/bench-compare.sh $(B)

# The reliability campaign (scripts/campaign.py): CAMPAIGN_TRIALS (default
# 1000) randomized trials, one to three outside kills at random moments
# (inside ft_init, during recovery and state transfer too), with and
# without forked workers, across shrink (file, in-band) and rejoin, over
# TCP, libfabric shm and tcp;ofi_rxm; a table per cell. CAMPAIGN_SEED
# replays one. make test runs a slice of it.
campaign: all
	/usr/bin/python3 scripts/campaign.py $(B) $${CAMPAIGN_TRIALS:-1000}

# The longer rejoin campaign: every random-kill row of test/rejoin_tests.sh
# with CAMPAIGN_TRIALS trials (default 20).
rejoin-campaign: all
	test/rejoin_tests.sh $(B) campaign

# ftcc across hosts made of network namespaces (root; SKIPPED otherwise):
# mpirun over 4 hosts x 2 ranks, tcp and libfabric, a whole host killed;
# then the same hosts under a real Slurm cluster (slurm-test).
cluster-test: all $(B)/test/tsan_rank $(B)/test/part_rank
	test/cluster/cluster_test.sh $(B)
	$(MAKE) slurm-test

# ftcc under Slurm's srun on a Slurm cluster of namespace hosts (slurmctld,
# a slurmd per host, munge): the matrix, a host killed, rejoin on a spare
# host, a partition. SLURM_TRIALS=10 repeats the matrix, kill and rejoin.
slurm-test: all $(B)/test/tsan_rank $(B)/test/part_rank
	scripts/deps.sh $(SLURM_PKGS)
	test/cluster/slurm_test.sh $(B)

# Growing back: killed ranks' new incarnations taken in at the next op
# (GROW_TRIALS=k repeats the rows).
grow-test: all $(B)/test/grow_rank
	test/grow_test.sh $(B)

# Failure detection and recovery times; shrink-policy overhead against abort.
bench-recovery: all
	@scripts/bench-recovery.sh $(B)

asan:
	$(MAKE) B=build-asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=address,undefined" test

# Criterion's runner aborts under ThreadSanitizer, so the threads (detector,
# fabric shm guard, main) are checked in real jobs instead: the library and a
# rank program built with -fsanitize=thread, launched by the plain ftcc-run.
# Fails on any TSan report.
tsan: deps
	$(MAKE) tools
	$(MAKE) B=build-tsan CFLAGS="-O1 -g -fsanitize=thread" LDFLAGS="-fsanitize=thread" \
		build-tsan/test/tsan_rank
	@scripts/tsan.sh build-tsan $(B)

# Then the man pages, the Python package where $(TORCH_PY) finds it for this
# prefix (when built), and what to set for a prefix the system does not search.
install: lib tools man torch
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR) $(DESTDIR)$(INCLUDEDIR)
	install -m 644 include/ftcc.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libftcc.so
	install -m 755 $(B)/ftcc-run $(B)/ftcc-log $(B)/ftcc-ckpt $(DESTDIR)$(BINDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@LIBS@|$(LIB_LDLIBS)|; s|@VERSION@|$(VERSION)|' ftcc.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/ftcc.pc
	@scripts/install-extras.sh install '$(B)' '$(DESTDIR)' '$(PREFIX)' '$(LIBDIR)' '$(BINDIR)' \
		'$(MANDIR)' '$(TORCH_PY)'

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libftcc.* $(DESTDIR)$(LIBDIR)/pkgconfig/ftcc.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/ftcc.h $(DESTDIR)$(BINDIR)/ftcc-run $(DESTDIR)$(BINDIR)/ftcc-log \
		$(DESTDIR)$(BINDIR)/ftcc-ckpt
	@scripts/install-extras.sh uninstall '$(B)' '$(DESTDIR)' '$(PREFIX)' '$(LIBDIR)' '$(BINDIR)' \
		'$(MANDIR)' '$(TORCH_PY)'

clean:
	rm -rf build build-asan build-tsan

help:
	@echo "make [all] | test | check | fuzz [FUZZ_SECONDS=60 | FUZZ_EXECS=n] [FUZZ=name] | fuzz-corpus | demo | trace-demo | bench"
	@echo "     | experiment [EXPERIMENT_FULL=1] | torch | torch-demo | bench-torch"
	@echo "     | bench-compare | bench-recovery | campaign | rejoin-campaign | cluster-test"
	@echo "     | man | install PREFIX=... | uninstall | asan | tsan | deps | clean"
	@echo "optional parts are detected with pkg-config; force with HAVE_FABRIC=1 / HAVE_URING=1 /"
	@echo "HAVE_PMIX=1, leave out with HAVE_FABRIC= / HAVE_URING= / HAVE_PMIX=; a change of flags"
	@echo "or parts rebuilds."

-include $(wildcard $(LIB_OBJ:.o=.d) $(B)/*.d $(B)/test/*.d $(B)/examples/*.d $(B)/fuzz/*.d \
	$(FUZZ_LIB_SRC:%.c=$(B)/fuzz/san/%.d) $(FUZZ_LIB_SRC:%.c=$(B)/fuzz/afl/%.d))

FORCE:
