/* main() for the fuzz targets without libFuzzer: feed every file named on the command line
 * (directories: every regular file in them, sorted) to LLVMFuzzerTestOneInput once
 * (and, with --mutations=N, N outputs of the target's own mutator, below).
 * Used by meson test to replay the seed corpus and tests/fuzz/regressions/. Exits 1 when an
 * argument cannot be read or names no file at all, so a missing corpus cannot pass. */
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include "fuzz_common.h"

/* A target's structure-aware mutator, when it has one (fuzz_semantic.c). With --mutations=N
 * each replayed file is also mutated N times (mutator seeds 1..N, each from the file) and every
 * result is run: a deterministic, short version of the fuzzing run for meson test. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
    __attribute__((weak));
static unsigned mutations;

static void replay_mutations(const uint8_t *data, size_t size) {
    enum { CAP = 1 << 16 };
    if (!mutations || !LLVMFuzzerCustomMutator || size > CAP) return;
    uint8_t *b = malloc(CAP);
    if (!b) return;
    for (unsigned k = 1; k <= mutations; k++) {
        memcpy(b, data, size);
        LLVMFuzzerTestOneInput(b, LLVMFuzzerCustomMutator(b, size, CAP, k));
    }
    free(b);
}

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    int bad = ferror(f);
    fclose(f);
    if (!bad) LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", n);
    if (!bad && buf) replay_mutations(buf, n);
    free(buf);
    return bad ? -1 : 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Number of files replayed, or -1 on error. */
static long replay(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) return replay_file(path) == 0 ? 1 : -1;
    DIR *d = opendir(path);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue; /* ., .. and dot files such as .gitkeep */
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn) break;
        names = nn;
        size_t len = strlen(path) + strlen(de->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) break;
        snprintf(names[n], len, "%s/%s", path, de->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        if (count >= 0) {
            long r = replay(names[i]);
            count = r < 0 ? -1 : count + r;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    long total = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--mutations=", 12) == 0) {
            mutations = (unsigned)strtoul(argv[i] + 12, NULL, 10);
            continue;
        }
        long r = replay(argv[i]);
        if (r < 0) {
            fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
            return 1;
        }
        total += r;
    }
    printf("replayed %ld inputs\n", total);
    return total > 0 ? 0 : 1;
}
