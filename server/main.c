/*
 * main.c - the bloomd executable: reads the configuration, answers --help, --version
 * and --ping, opens the log, then runs the server until SIGTERM/SIGINT. Exit status:
 * 0 after a clean stop, 1 on a runtime failure, 2 on a configuration error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "server/config.h"
#include "server/log.h"
#include "server/ping.h"
#include "server/server.h"

int main(int argc, char **argv)
{
    struct config cfg;
    enum config_action action;
    char err[CONFIG_PATH_MAX + 256];
    if (config_load(&cfg, argc, argv, &action, err, sizeof(err)) != CONFIG_OK) {
        fprintf(stderr, "bloomd: %s\n", err);
        return 2;
    }
    switch (action) {
    case CONFIG_HELP:
        fputs(config_usage(), stdout);
        return 0;
    case CONFIG_VERSION:
        printf("bloomd %s\n", BLOOMD_VERSION);
        return 0;
    case CONFIG_PING:
        if (ping_server(cfg.bind, cfg.port, 2000, err, sizeof(err)) != 0) {
            fprintf(stderr, "bloomd: ping: %s\n", err);
            return 1;
        }
        return 0;
    case CONFIG_RUN:
        break;
    }

    signal(SIGPIPE, SIG_IGN);
    log_set_format((enum log_format)cfg.log_format);
    if (log_open(cfg.log_file, (enum log_level)cfg.log_level) != 0) {
        fprintf(stderr, "bloomd: log_file %s: %s\n", cfg.log_file, strerror(errno));
        return 2;
    }
    struct server srv;
    int rc = server_init(&srv, &cfg);
    if (rc == SERVER_OK)
        rc = server_run(&srv);
    else
        log_msg(LOG_ERROR, "out of memory at start-up");
    server_destroy(&srv);
    log_close();
    return rc == SERVER_OK ? 0 : 1;
}
