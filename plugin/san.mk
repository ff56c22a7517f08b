# Sanitizer builds of this Makefile, each in its own build directory (the plain build/ that the
# Python tests load stays as it is). Compile and link flags both carry the sanitizer, so the
# .so files link too (-z defs needs the runtime named).
#   SAN=asan  ASan + UBSan + LeakSanitizer, any UB fatal: every C unit test
#   SAN=tsan  ThreadSanitizer: every C unit test (those with progress threads are the point)
#   SAN=fuzz  clang, libFuzzer + ASan + UBSan: the harnesses in fuzz/ (fuzz/fuzz.mk)
SAN ?=
ifeq ($(SAN),asan)
B         := build-asan
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_ENV   := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
             UBSAN_OPTIONS=print_stacktrace=1
else ifeq ($(SAN),tsan)
B         := build-tsan
# -Wno-tsan: TSan does not model the shm seqlock's fences; its racing copies are atomic loads.
SAN_FLAGS := -fsanitize=thread -Wno-tsan
SAN_ENV   := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tsan.supp
else ifeq ($(SAN),fuzz)
FUZZ_CC   ?= clang
CC        := $(FUZZ_CC)
B         := build-fuzz
SAN_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
             -fno-omit-frame-pointer
else ifneq ($(SAN),)
$(error SAN must be asan, tsan or fuzz, not '$(SAN)')
endif
override CFLAGS  += $(SAN_FLAGS)
override LDFLAGS += $(SAN_FLAGS)
