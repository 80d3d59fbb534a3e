/* nfsbench: one libnfs client process per measurement, so that process start-up and MOUNT are
 * paid once and not per file (the libnfs utilities would pay them for each of 20,000 files).
 * Calls are synchronous: one outstanding RPC, i.e. round-trip bound, like a booting client
 * walking its root.
 *
 *   nfsbench read URL PATH   sequential read of one file in rtmax-sized chunks
 *   nfsbench tree URL DIR    walk DIR; open, read to the end and close every regular file
 *   nfsbench ls   URL DIR [N]  walk DIR N times (default 1); list every directory
 *                              (READDIRPLUS attributes). One walk of 20,000 entries is
 *                              about 0.1 s: too short to measure alone on a busy machine.
 *
 * URL is an nfs:// URL of the export (options such as ?nfsport=&mountport=&version=3 apply).
 * Prints one line: "<op> <items> <bytes> <seconds>".
 */
#include <fcntl.h>
#include <sys/time.h>
#include <nfsc/libnfs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct nfs_context *nfs;
static char *buf;
static size_t bufsize;
static uint64_t items, bytes;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int read_file(const char *path) {
    struct nfsfh *fh;
    if (nfs_open(nfs, path, O_RDONLY, &fh) < 0) {
        fprintf(stderr, "open %s: %s\n", path, nfs_get_error(nfs));
        return -1;
    }
    for (;;) {
        int n = nfs_read(nfs, fh, bufsize, buf);
        if (n < 0) {
            fprintf(stderr, "read %s: %s\n", path, nfs_get_error(nfs));
            nfs_close(nfs, fh);
            return -1;
        }
        if (n == 0) break;
        bytes += n;
    }
    nfs_close(nfs, fh);
    items++;
    return 0;
}

/* Depth-first; `read` says whether regular files are read or only counted. */
static int walk(const char *dir, int read) {
    struct nfsdir *d;
    struct nfsdirent *e;
    if (nfs_opendir(nfs, dir, &d) < 0) {
        fprintf(stderr, "opendir %s: %s\n", dir, nfs_get_error(nfs));
        return -1;
    }
    /* Collect first: recursing while the listing is open would keep every level's in memory
     * anyway, and reading files between pages is not what we measure. */
    size_t n = 0, cap = 64;
    char **subdirs = malloc(cap * sizeof *subdirs);
    char **files = malloc(cap * sizeof *files);
    size_t nf = 0, capf = 64;
    while ((e = nfs_readdir(nfs, d)) != NULL) {
        if (!strcmp(e->name, ".") || !strcmp(e->name, "..")) continue;
        if (!read) items++;
        char *p = malloc(strlen(dir) + strlen(e->name) + 2);
        sprintf(p, "%s/%s", strcmp(dir, "/") ? dir : "", e->name);
        if ((e->mode & 0170000) == 0040000) {
            if (n == cap) subdirs = realloc(subdirs, (cap *= 2) * sizeof *subdirs);
            subdirs[n++] = p;
        } else if (read && (e->mode & 0170000) == 0100000) {
            if (nf == capf) files = realloc(files, (capf *= 2) * sizeof *files);
            files[nf++] = p;
        } else {
            free(p);
        }
    }
    nfs_closedir(nfs, d);
    int rc = 0;
    for (size_t i = 0; i < nf; i++) {
        if (rc == 0 && read_file(files[i]) < 0) rc = -1;
        free(files[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && walk(subdirs[i], read) < 0) rc = -1;
        free(subdirs[i]);
    }
    free(files);
    free(subdirs);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && !strcmp(argv[1], "ls"))) {
        fprintf(stderr, "usage: %s read|tree|ls URL PATH [PASSES]\n", argv[0]);
        return 2;
    }
    nfs = nfs_init_context();
    struct nfs_url *url = nfs_parse_url_dir(nfs, argv[2]);
    if (!url) {
        fprintf(stderr, "url: %s\n", nfs_get_error(nfs));
        return 1;
    }
    if (nfs_mount(nfs, url->server, url->path) < 0) {
        fprintf(stderr, "mount: %s\n", nfs_get_error(nfs));
        return 1;
    }
    bufsize = nfs_get_readmax(nfs);
    if (bufsize == 0 || bufsize > (1 << 20)) bufsize = 1 << 20;
    buf = malloc(bufsize);
    double t0 = now();
    int rc;
    if (!strcmp(argv[1], "read")) rc = read_file(argv[3]);
    else if (!strcmp(argv[1], "tree")) rc = walk(argv[3], 1);
    else if (!strcmp(argv[1], "ls")) {
        int passes = argc == 5 ? atoi(argv[4]) : 1;
        rc = 0;
        for (int i = 0; i < passes && rc == 0; i++) rc = walk(argv[3], 0);
    }
    else rc = -1;
    double t = now() - t0;
    if (rc < 0) return 1;
    printf("%s %llu %llu %.6f\n", argv[1], (unsigned long long)items, (unsigned long long)bytes, t);
    nfs_destroy_url(url);
    nfs_destroy_context(nfs);
    return 0;
}
