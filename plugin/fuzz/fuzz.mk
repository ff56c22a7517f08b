# libFuzzer harnesses (fuzz/fuzz_*.c, each described in its header) against the internal
# library built with the same flags (SAN=fuzz, san.mk). Included by the Makefile.
#   make -C plugin fuzz [FUZZ_SECONDS=120]   runs each harness that long (fuzz/run.sh)
#   make -C plugin fuzz-seeds                rewrites the encoder-made seeds in fuzz/corpus/
FUZZ_SECONDS ?= 120
FUZZERS := $(patsubst fuzz/%.c,$(B)/fuzz/%,$(wildcard fuzz/fuzz_*.c))

.PHONY: fuzz fuzz-build fuzz-seeds
ifeq ($(SAN),fuzz)
fuzz-build: $(FUZZERS)
fuzz: fuzz-build
	fuzz/run.sh $(B) $(FUZZ_SECONDS) $(FUZZERS)
else
fuzz fuzz-build:
	$(MAKE) SAN=fuzz $@
endif

# -Itests: fuzz_conn drives a connection with the tests' scripted peer (lg_test_peer.h).
$(B)/fuzz/%: fuzz/%.c fuzz/fuzz.h $(B)/liblinkguard.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -fsanitize=fuzzer -o $@ $< $(B)/liblinkguard.a $(LDLIBS)

# The seeds come from the project's own encoders (fuzz/seeds.c, built plain).
fuzz-seeds: $(B)/fuzz-seeds
	$(B)/fuzz-seeds fuzz/corpus
$(B)/fuzz-seeds: fuzz/seeds.c $(B)/liblinkguard.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/liblinkguard.a $(LDLIBS)
