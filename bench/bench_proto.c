/*
 * bench_proto.c - protocol throughput: parsing pipelined CHECKADD lines and the same keys
 * as RESP BF.MADD arrays (1 to 1,000 keys of 16 and 64 bytes, many requests in one buffer,
 * as a server sees them after a large read), and formatting CHECK replies. "walk" also
 * visits every key as the server's execute loop does (proto_next_keys, 256 at a time).
 * Each figure is the best of a few ~0.2 s runs.
 * Run: make bench-proto
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/proto.h"
#include "proto/resp.h"

#define BENCH_BUF_BYTES ((size_t)8 << 20)
#define BENCH_RUN_SECONDS 0.2
#define BENCH_RUNS 3

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x243f6a8885a308d3u;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Writes a random key of len bytes at p; returns the bytes written. */
static size_t random_key(char *p, size_t len)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789_-";
    for (size_t i = 0; i < len; i++)
        p[i] = alphabet[rng() % (sizeof(alphabet) - 1)];
    return len;
}

/* Fills about BENCH_BUF_BYTES with "CHECKADD bench <keys>\r\n" lines; returns the length. */
static size_t build_lines(char *buf, size_t keys, size_t key_len, size_t *lines)
{
    size_t line_len = 15 + keys * (key_len + 1) + 2;
    size_t n = 0;
    *lines = 0;
    while (n + line_len <= BENCH_BUF_BYTES || *lines == 0) {
        memcpy(buf + n, "CHECKADD bench", 14);
        n += 14;
        for (size_t k = 0; k < keys; k++) {
            buf[n++] = ' ';
            n += random_key(buf + n, key_len);
        }
        buf[n++] = '\r';
        buf[n++] = '\n';
        (*lines)++;
    }
    return n;
}

/* The same keys as "BF.MADD bench <keys>" RESP arrays; returns the length. */
static size_t build_frames(char *buf, size_t keys, size_t key_len, size_t *lines)
{
    size_t frame_len = 40 + keys * (key_len + 12);
    size_t n = 0;
    *lines = 0;
    while (n + frame_len <= BENCH_BUF_BYTES || *lines == 0) {
        n += (size_t)sprintf(buf + n, "*%zu\r\n$7\r\nBF.MADD\r\n$5\r\nbench\r\n", keys + 2);
        for (size_t k = 0; k < keys; k++) {
            n += (size_t)sprintf(buf + n, "$%zu\r\n", key_len);
            n += random_key(buf + n, key_len);
            buf[n++] = '\r';
            buf[n++] = '\n';
        }
        (*lines)++;
    }
    return n;
}

/* Every key of req, as the execute loop takes them. */
static size_t walk_keys(const struct proto_request *req)
{
    struct proto_slice rest = req->args, keys[256];
    size_t n, total = 0;
    while ((n = proto_next_keys(req, &rest, keys, 256)) > 0)
        total += n;
    return total;
}

/* One request of buf[0..len) as the server parses it (text, or RESP then resp_map). */
static int parse_one(bool resp, const char *buf, size_t len, struct proto_request *req,
                     size_t *consumed)
{
    if (!resp)
        return proto_parse(buf, len, NULL, req, consumed);
    struct resp_command cmd;
    struct resp_mapped m;
    int rc = resp_parse(buf, len, NULL, &cmd, consumed);
    if (rc != RESP_OK)
        return rc;
    resp_map(&cmd, &m);
    if (m.why != NULL)
        return -1;
    *req = m.req;
    return PROTO_OK;
}

/* Parses the whole buffer; with walk, also visits every key as the server does. */
static size_t parse_all(bool resp, const char *buf, size_t len, bool walk)
{
    struct proto_request req;
    size_t consumed, keys = 0, off = 0;
    while (off < len) {
        int rc = parse_one(resp, buf + off, len - off, &req, &consumed);
        if (rc != PROTO_OK) {
            fprintf(stderr, "bench_proto: unexpected parse result %d\n", rc);
            exit(1);
        }
        keys += walk ? walk_keys(&req) : req.nargs;
        off += consumed;
    }
    return keys;
}

/* Best seconds per pass over the buffer. */
static double time_parse(bool resp, const char *buf, size_t len, bool walk, size_t want_keys)
{
    double best = 1e30;
    for (int run = 0; run < BENCH_RUNS; run++) {
        size_t passes = 0;
        double t0 = now(), t;
        do {
            if (parse_all(resp, buf, len, walk) != want_keys) {
                fprintf(stderr, "bench_proto: key count mismatch\n");
                exit(1);
            }
            passes++;
            t = now() - t0;
        } while (t < BENCH_RUN_SECONDS);
        if (t / (double)passes < best)
            best = t / (double)passes;
    }
    return best;
}

static void bench_parse(bool resp)
{
    static const size_t key_counts[] = {1, 10, 100, 1000};
    static const size_t key_lens[] = {16, 64};
    char *buf = malloc(BENCH_BUF_BYTES + 128 * 1024);
    if (buf == NULL) {
        perror("malloc");
        exit(1);
    }
    printf("%sparse: pipelined %s, %zu MiB buffer, best of %d\n", resp ? "\n" : "",
           resp ? "RESP BF.MADD arrays" : "CHECKADD lines", BENCH_BUF_BYTES >> 20, BENCH_RUNS);
    printf("| keys/request | key bytes | parse MB/s | parse Mkeys/s | Mrequests/s "
           "| parse+walk MB/s | parse+walk Mkeys/s |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof(key_lens) / sizeof(key_lens[0]); i++)
        for (size_t j = 0; j < sizeof(key_counts) / sizeof(key_counts[0]); j++) {
            size_t lines;
            size_t len = resp ? build_frames(buf, key_counts[j], key_lens[i], &lines)
                              : build_lines(buf, key_counts[j], key_lens[i], &lines);
            size_t keys = lines * key_counts[j];
            double t = time_parse(resp, buf, len, false, keys);
            double tw = time_parse(resp, buf, len, true, keys);
            printf("| %zu | %zu | %.0f | %.1f | %.2f | %.0f | %.1f |\n", key_counts[j], key_lens[i],
                   (double)len / t / 1e6, (double)keys / t / 1e6, (double)lines / t / 1e6,
                   (double)len / tw / 1e6, (double)keys / tw / 1e6);
        }
    free(buf);
}

static void bench_format(void)
{
    static const size_t sizes[] = {1, 100, 1000, 100000};
    enum { MAX_BITS = 100000 };
    bool *bits = malloc(MAX_BITS * sizeof(bool));
    if (bits == NULL) {
        perror("malloc");
        exit(1);
    }
    for (size_t i = 0; i < MAX_BITS; i++)
        bits[i] = rng() & 1;
    struct proto_buf b = {0};
    printf("\nformat: CHECK replies into a reused buffer, best of %d\n", BENCH_RUNS);
    printf("| results/reply | MB/s | Mresults/s | Mreplies/s |\n|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        size_t reps = 4000000 / n + 1; /* replies per reset of the buffer */
        double best = 1e30;
        for (int run = 0; run < BENCH_RUNS; run++) {
            size_t replies = 0;
            double t0 = now(), t;
            do {
                proto_buf_reset(&b);
                for (size_t r = 0; r < reps; r++) {
                    proto_reply_bits(&b, bits, n, true);
                    proto_reply_end(&b);
                }
                replies += reps;
                t = now() - t0;
            } while (t < BENCH_RUN_SECONDS);
            if (b.failed) {
                fprintf(stderr, "bench_proto: out of memory\n");
                exit(1);
            }
            if (t / (double)replies < best)
                best = t / (double)replies;
        }
        double bytes = (double)(2 * n + 1);
        printf("| %zu | %.0f | %.1f | %.2f |\n", n, bytes / best / 1e6, (double)n / best / 1e6,
               1.0 / best / 1e6);
    }
    proto_buf_free(&b);
    free(bits);
}

int main(void)
{
    bench_parse(false);
    bench_parse(true);
    bench_format();
    return 0;
}
