// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * benchtool's shared part: what benchtool.c (the generators, sinks and main) and
 * benchtool_hold.c (the connection holders) both use. What each command does:
 * benchtool.c's opening comment.
 */
#ifndef BENCHTOOL_H
#define BENCHTOOL_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_LOCAL_PORT_RANGE
#define IP_LOCAL_PORT_RANGE 51 /* Linux 6.3; glibc's headers predate it */
#endif

double now_s(void);
double cpu_s(void);
void die(const char *what);
struct sockaddr_in addr_of(const char *ip, const char *port);
int listen_on(const char *port);
rlim_t files_up_to(rlim_t want);
void print_errnos(const unsigned long long *by_errno);
int read_full(int fd, void *buf, size_t len);
void die_with_parent(pid_t parent);

/* benchtool_hold.c */
int tcp_keep(const char *port);
int tcp_serve_idle(const char *port, int workers);
int tcp_hold(const char *dst, const char *port, long n, int concurrency);

#endif /* BENCHTOOL_H */
