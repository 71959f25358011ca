/* A driver for a fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput
 * once on every file named (directories are walked; only the files whose
 * name ends in SUFFIX and whose size is at most MAX_BYTES), as libFuzzer
 * does with a corpus before it mutates. Built with the ordinary compiler
 * into the test build (tests/fuzz.cmake: ctest `fuzz_replay_*`, both passes
 * of `make test`, the second under ASan + UBSan), so the targets' code
 * cannot rot and the seeds (fuzz/seeds: reproducers of earlier findings,
 * the examples, the test models) are checked by every test run; mutation
 * is `make fuzz`'s (clang).
 *
 *   fuzz_replay_onnx [--suffix .onnx] [--max-bytes N] PATH...
 *
 * Exit 0 when every input ran (the target aborts on a broken contract),
 * 2 on a bad argument or an unreadable file, 77 when no input was found
 * (ctest's skip: a corpus that vanished must not pass).
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The target linked in (fuzz_onnx.c or fuzz_npy.c). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *replay_suffix = "";
static long long replay_max = 1 << 16;
static int replay_count;
static int replay_bad;

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int replay_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type != FTW_F || !ends_with(path, replay_suffix) || sb->st_size > replay_max) return 0;
    FILE *f = fopen(path, "rb");
    size_t n = (size_t)sb->st_size;
    /* The input in a buffer of its exact size, as libFuzzer passes it, so
     * that ASan sees a read past its end. */
    uint8_t *buf = malloc(n ? n : 1);
    if (!f || !buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        replay_bad = 1;
        free(buf);
        if (f) fclose(f);
        return 0;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    replay_count++;
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--suffix") == 0) {
            replay_suffix = argv[i + 1];
        } else if (strcmp(argv[i], "--max-bytes") == 0) {
            char *end;
            replay_max = strtoll(argv[i + 1], &end, 10);
            if (*end || replay_max < 0) {
                fprintf(stderr, "fuzz_replay: --max-bytes '%s' is not a byte count\n", argv[i + 1]);
                return 2;
            }
        } else {
            fprintf(stderr, "fuzz_replay: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "usage: %s [--suffix S] [--max-bytes N] PATH...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) continue; /* a seed directory the build does not have */
        if (nftw(argv[i], replay_one, 16, FTW_PHYS) != 0) {
            fprintf(stderr, "fuzz_replay: cannot walk %s\n", argv[i]);
            return 2;
        }
    }
    if (replay_bad) return 2;
    if (replay_count == 0) {
        printf("SKIP: no input ending in '%s' of at most %lld bytes\n", replay_suffix, replay_max);
        return 77;
    }
    printf("fuzz_replay: %d inputs ran clean\n", replay_count);
    return 0;
}
