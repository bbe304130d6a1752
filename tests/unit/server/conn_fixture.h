/*
 * conn_fixture.h - what the connection tests (test_park.c, test_conn.c) share: a real
 * server with its worker, lanes and snapshotter on a temporary data dir, one client
 * connection over a socketpair (fx->peer is the client's end), and a job that holds the
 * long lane until released, so a parked reply stays parked as long as a test wants.
 */
#ifndef BLOOMD_TESTS_CONN_FIXTURE_H
#define BLOOMD_TESTS_CONN_FIXTURE_H

/* A job that blocks the job thread until a byte arrives on its pipe. */
struct blocker {
    struct job job;
    int pipe[2];
};

struct fixture {
    char dir[64];
    struct server srv;
    int peer; /* the client's end of the socketpair; -1 once closed */
    struct blocker block;
    char got[4096];
    size_t got_len;
    bool peer_eof; /* the client read the end of the stream */
};

static void blocker_run(struct job *j)
{
    struct blocker *b = (struct blocker *)j;
    char c;
    while (read(b->pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
}

static void blocker_free(struct job *j)
{
    (void)j; /* lives in the fixture */
}

static void hold_jobs(struct fixture *fx)
{
    fx->block.job = (struct job){.run = blocker_run, .free = blocker_free};
    jobs_post(fx->srv.lanes[JOBS_LONG], &fx->block.job);
}

static void release_jobs(struct fixture *fx)
{
    assert_int_equal(write(fx->block.pipe[1], "x", 1), 1);
}

/* The server and one text-protocol client; dir_template as for mkdtemp. */
static struct fixture *fixture_new(const char *dir_template)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "%s", dir_template);
    assert_non_null(mkdtemp(fx->dir));
    struct config cfg;
    config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", fx->dir);
    cfg.snapshot_interval = 0;
    assert_int_equal(server_init(&fx->srv, &cfg), SERVER_OK);
    fx->srv.worker = calloc(1, sizeof *fx->srv.worker);
    assert_non_null(fx->srv.worker);
    assert_int_equal(worker_init(fx->srv.worker, &fx->srv), 0);
    assert_int_equal(jobs_start_lanes(fx->srv.lanes, fx->srv.worker->base, &fx->srv.stopping), 0);
    assert_int_equal(snapshot_start(&fx->srv, fx->srv.worker->base), 0);
    assert_int_equal(pipe(fx->block.pipe), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct sockaddr sa = {.sa_family = AF_UNIX};
    assert_int_equal(conn_transport_plain.accept(&conn_transport_plain, fx->srv.worker,
                                                 &conn_proto_text, sv[0], &sa, sizeof sa),
                     0);
    fx->peer = sv[1];
    return fx;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    if (fx->peer >= 0)
        close(fx->peer);
    fx->srv.stopping = true; /* answers still owed are dropped, as at SIGTERM */
    server_destroy(&fx->srv);
    close(fx->block.pipe[0]);
    close(fx->block.pipe[1]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fx->dir);
    assert_int_equal(system(cmd), 0);
    free(fx);
    return 0;
}

#endif
