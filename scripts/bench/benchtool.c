// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * benchtool - the small traffic generators and sinks of scripts/bench.sh.
 *
 *   udp-send DST PORT SECS LEN  sendmmsg() batches of LEN-byte datagrams on a
 *                               connected socket for SECS seconds.
 *                               Prints {"sent":N,"errors":E,"secs":T,"cpu_s":C}.
 *   udp-sink PORT               bind PORT and drain it with recvmmsg(), so the
 *                               receiver never answers "port unreachable".
 *   tcp-cps DST PORT SECS       one connection at a time: socket(), connect(),
 *                               close() with RST (SO_LINGER 0), for SECS
 *                               seconds. A connect() that takes over 1 s (a
 *                               lost SYN) counts as a failure.
 *                               Prints {"ok":N,"fail":F,"secs":T,"cpu_s":C,"errno":{...}}.
 *   tcp-accept PORT             accept() and close() forever.
 *   tcp-churn DST PORT SECS WORKERS
 *                               WORKERS processes, each one connection at a
 *                               time, as fast as it can: connect(), send a
 *                               16-byte request, read the 16-byte answer,
 *                               close() (an orderly close: the client's port
 *                               goes to TIME_WAIT, reused by tcp_tw_reuse), for
 *                               SECS seconds. A connection that fails, or takes
 *                               over 1 s (a lost SYN: the retransmission comes
 *                               after 1 s), is counted; the slowest is reported.
 *                               Prints {"ok":N,"fail":F,"stalled":S,"max_ms":M,
 *                               "secs":T,"errno":{...}}.
 *   tcp-serve PORT WORKERS      WORKERS processes accept() on one socket; each
 *                               connection: read 16 bytes, answer them, read to
 *                               EOF, close() (the client closes first).
 *   tcp-serve-idle PORT WORKERS as tcp-serve, but each of the WORKERS processes
 *                               serves all its connections at once (epoll):
 *                               one that never sends stays open, idle, and
 *                               blocks nobody, until its client closes or
 *                               resets it (up to KEEP_MAX in all; more
 *                               processes when one may not hold their share).
 *                               Clients that hold connections (tcp-hold) and
 *                               clients that churn (tcp-churn) share one
 *                               remote endpoint this way.
 *   tcp-keep PORT               accept() forever and keep every connection open
 *                               (never read, never closed) until killed; ends
 *                               with its parent. On SIGTERM/SIGINT prints
 *                               {"accepted":N,"errors":E,"processes":P,
 *                               "unreported":U,"errno":{...}}: accept()
 *                               failures (EMFILE...) are counted and survived.
 *   tcp-hold DST PORT N CONCURRENCY
 *                               a greedy client: up to N connections, at most
 *                               CONCURRENCY non-blocking connects in flight
 *                               (epoll), each given 3 s (then ETIMEDOUT). A
 *                               connect() that finds no local port
 *                               (EADDRNOTAVAIL) fails and the next is tried;
 *                               1000 of those in a row end the attempts early
 *                               ("skipped" counts the rest). When all are
 *                               decided, prints {"ok":N,"fail":F,"skipped":S,
 *                               "processes":P,"errno":{"110":F},
 *                               "last_ok_secs":L,"secs":T} (errno numbers as
 *                               keys; L: when the last connection was
 *                               established), holds the connections until
 *                               stdin reaches EOF, then closes them with RST
 *                               and exits 0.
 *                               Both raise RLIMIT_NOFILE as far as they may
 *                               (the hard limit takes CAP_SYS_RESOURCE) and
 *                               spread the sockets over P processes when one
 *                               may not hold them all.
 *   tcx-attach PROG DEV ingress|egress LINK
 *                               attach the program pinned at PROG to DEV's TCX
 *                               hook (in this netns) and pin the link at LINK
 *                               (the empty-hooks anchor; bpftool here predates
 *                               TCX). Exits 3 when the kernel has no TCX.
 *
 * Why not iperf3 / python for these: iperf3 -u writes one datagram per syscall
 * and reads the clock per packet, and a python connect loop spends more time in
 * the interpreter than in the kernel; either way the tool, not the forwarding
 * path under test, would set the ceiling. Here the per-packet cost outside the
 * path is one slot of a 64-message sendmmsg(), and the per-connection cost is
 * three syscalls.
 */
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

#define BATCH 64
#define MAX_LEN 9000

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * CPU seconds this process used (user + system). The kernel here uses tick
 * accounting without IRQ_TIME_ACCOUNTING, so softirq work done on our behalf
 * in our context (on veths: the whole forwarding path of what we send) is
 * charged to us too. Unlike a rate, this does not drop when a noisy neighbour
 * takes the CPU away.
 */
static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what)
{
	fprintf(stderr, "benchtool: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct sockaddr_in addr_of(const char *ip, const char *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(port)) };

	if (ip && inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
		fprintf(stderr, "benchtool: bad IPv4 address %s\n", ip);
		exit(2);
	}
	return sa;
}

static int udp_send(const char *dst, const char *port, double secs, int len)
{
	static char buf[MAX_LEN];
	struct mmsghdr msgs[BATCH];
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct sockaddr_in sa = addr_of(dst, port);
	unsigned long long sent = 0, errors = 0;
	double t0, t, c0;
	int fd, i;

	if (len < 1 || len > MAX_LEN) {
		fprintf(stderr, "benchtool: LEN must be 1..%d\n", MAX_LEN);
		return 2;
	}
	memset(buf, 'x', sizeof(buf));
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < BATCH; i++) {
		msgs[i].msg_hdr.msg_iov = &iov;
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("connect");
	c0 = cpu_s();
	t0 = now_s();
	do {
		int n = sendmmsg(fd, msgs, BATCH, 0);

		if (n > 0)
			sent += n;
		else
			errors++; /* e.g. ENOBUFS, or ECONNREFUSED from an ICMP error */
		t = now_s();
	} while (t - t0 < secs);
	printf("{\"sent\":%llu,\"errors\":%llu,\"secs\":%.6f,\"cpu_s\":%.6f}\n", sent, errors, t - t0,
	       cpu_s() - c0);
	return 0;
}

static int udp_sink(const char *port)
{
	static char bufs[BATCH][2048];
	struct mmsghdr msgs[BATCH];
	struct iovec iovs[BATCH];
	struct sockaddr_in sa = addr_of(NULL, port);
	int fd, i, rcvbuf = 4 << 20;

	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < BATCH; i++) {
		iovs[i].iov_base = bufs[i];
		iovs[i].iov_len = sizeof(bufs[i]);
		msgs[i].msg_hdr.msg_iov = &iovs[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("bind");
	for (;;)
		recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
	return 0;
}

static int tcp_cps(const char *dst, const char *port, double secs)
{
	struct sockaddr_in sa = addr_of(dst, port);
	struct timeval tmo = { .tv_sec = 1 };
	struct linger abort_close = { .l_onoff = 1, .l_linger = 0 };
	unsigned long long ok = 0, fail = 0;
	unsigned long long by_errno[256] = { 0 };
	double t0, t, c0;
	int i, first = 1;

	c0 = cpu_s();
	t0 = now_s();
	do {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0)
			die("socket");
		/* Linux applies SO_SNDTIMEO to connect(): bounds a lost SYN to 1 s. */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
		/*
		 * Close with RST: no TIME_WAIT. With orderly closes every client
		 * port sits in TIME_WAIT, and the pod's ephemeral range (even
		 * ports first) plus the 1 s tcp_tw_reuse rule cap the loop at
		 * ~14k/s whatever the NAT: the tool's ceiling, not the path's.
		 */
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			ok++;
		} else {
			fail++;
			by_errno[errno & 255]++;
		}
		close(fd);
		t = now_s();
	} while (t - t0 < secs);
	printf("{\"ok\":%llu,\"fail\":%llu,\"secs\":%.6f,\"cpu_s\":%.6f,\"errno\":{", ok, fail, t - t0,
	       cpu_s() - c0);
	for (i = 0; i < 256; i++) {
		if (by_errno[i]) {
			/* SO_SNDTIMEO expiring leaves connect() with EINPROGRESS */
			printf("%s\"%s\":%llu", first ? "" : ",",
			       i == EINPROGRESS ? "timeout (1 s)" : strerror(i), by_errno[i]);
			first = 0;
		}
	}
	printf("}}\n");
	return 0;
}

/* A TCP socket listening on PORT, every address. */
static int listen_on(const char *port)
{
	struct sockaddr_in sa = addr_of(NULL, port);
	int fd, one = 1;

	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("bind");
	if (listen(fd, 4096))
		die("listen");
	return fd;
}

static int tcp_accept(const char *port)
{
	int fd = listen_on(port);

	for (;;) {
		int c = accept(fd, NULL, NULL);

		if (c >= 0)
			close(c);
	}
	return 0;
}

/* One tcp-churn worker's tally, sent to the parent through a pipe. */
struct churn_tally {
	unsigned long long ok, fail, stalled;
	double max_s;
	unsigned long long by_errno[256];
};

static int churn_one(const struct sockaddr_in *sa, double *took)
{
	struct timeval tmo = { .tv_sec = 2 };
	char buf[16] = "0123456789abcdef";
	double t0 = now_s();
	int fd = socket(AF_INET, SOCK_STREAM, 0), err = 0;
	ssize_t n, got = 0;

	if (fd < 0)
		die("socket");
	/* Linux applies SO_SNDTIMEO to connect(): bounds lost SYNs to 2 s (one retransmission). */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) || send(fd, buf, sizeof(buf), 0) != sizeof(buf)) {
		err = errno ? errno : EIO;
		goto out;
	}
	while (got < (ssize_t)sizeof(buf) && (n = recv(fd, buf, sizeof(buf) - got, 0)) > 0)
		got += n;
	if (got != sizeof(buf))
		err = n < 0 ? errno : ECONNRESET;
out:
	close(fd);
	*took = now_s() - t0;
	return err;
}

static int tcp_churn(const char *dst, const char *port, double secs, int workers)
{
	struct sockaddr_in sa = addr_of(dst, port);
	struct churn_tally all = { 0 };
	double t0 = now_s();
	int pipes[256][2], w, i, first = 1;

	if (workers < 1 || workers > 256) {
		fprintf(stderr, "benchtool: WORKERS must be 1..256\n");
		return 2;
	}
	for (w = 0; w < workers; w++) {
		if (pipe(pipes[w]))
			die("pipe");
		if (fork() == 0) {
			struct churn_tally t = { 0 };
			double took;

			close(pipes[w][0]);
			do {
				int err = churn_one(&sa, &took);

				if (err) {
					t.fail++;
					t.by_errno[err & 255]++;
				} else if (took > 1.0) {
					t.stalled++;
				} else {
					t.ok++;
				}
				if (took > t.max_s)
					t.max_s = took;
			} while (now_s() - t0 < secs);
			if (write(pipes[w][1], &t, sizeof(t)) != sizeof(t))
				_exit(1);
			_exit(0);
		}
		close(pipes[w][1]);
	}
	for (w = 0; w < workers; w++) {
		struct churn_tally t;

		if (read(pipes[w][0], &t, sizeof(t)) != sizeof(t))
			die("a worker died");
		all.ok += t.ok;
		all.fail += t.fail;
		all.stalled += t.stalled;
		if (t.max_s > all.max_s)
			all.max_s = t.max_s;
		for (i = 0; i < 256; i++)
			all.by_errno[i] += t.by_errno[i];
	}
	while (wait(NULL) > 0)
		;
	printf("{\"ok\":%llu,\"fail\":%llu,\"stalled\":%llu,\"max_ms\":%.1f,\"secs\":%.6f,\"errno\":{",
	       all.ok, all.fail, all.stalled, all.max_s * 1e3, now_s() - t0);
	for (i = 0; i < 256; i++) {
		if (all.by_errno[i]) {
			printf("%s\"%s\":%llu", first ? "" : ",",
			       i == EINPROGRESS || i == EAGAIN ? "timeout (2 s)" : strerror(i), all.by_errno[i]);
			first = 0;
		}
	}
	printf("}}\n");
	return 0;
}

static int tcp_serve(const char *port, int workers)
{
	int fd = listen_on(port), w;

	for (w = 1; w < workers; w++) {
		if (fork() == 0) {
			/* A worker ends with the process its caller started and ends (by PID):
			 * none is left behind holding the test's namespace. */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1)
				_exit(0);
			break;
		}
	}
	for (;;) {
		char buf[64];
		ssize_t n, got = 0;
		int c = accept(fd, NULL, NULL);

		if (c < 0)
			continue;
		while (got < 16 && (n = recv(c, buf, sizeof(buf), 0)) > 0)
			got += n;
		if (got >= 16 && send(c, buf, 16, 0) == 16)
			while (recv(c, buf, sizeof(buf), 0) > 0)
				; /* until the client's FIN */
		close(c);
	}
	return 0;
}

/*
 * Raise RLIMIT_NOFILE towards want (soft and hard; fs.nr_open, host-wide, is
 * left alone: its default 1048576 is room enough). Raising the hard limit takes
 * CAP_SYS_RESOURCE; without it the soft limit goes up to the hard one. Returns
 * the limit now in force: the callers spread their sockets over processes when
 * it is short of want.
 */
static rlim_t files_up_to(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		die("getrlimit");
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return want;
	rl.rlim_cur = want;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		rl.rlim_max = want;
	if (!setrlimit(RLIMIT_NOFILE, &rl))
		return want;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		die("getrlimit");
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		die("setrlimit RLIMIT_NOFILE");
	return rl.rlim_cur;
}

/* {"<errno>":count,...} of the non-zero entries of by_errno[256]. */
static void print_errnos(const unsigned long long *by_errno)
{
	int i, first = 1;

	printf("{");
	for (i = 0; i < 256; i++) {
		if (by_errno[i]) {
			printf("%s\"%d\":%llu", first ? "" : ",", i, by_errno[i]);
			first = 0;
		}
	}
	printf("}");
}

/* Read exactly len bytes (a struct a worker wrote); 0 at EOF (the worker died). */
static int read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		got += n;
	}
	return 1;
}

/* A forked worker ends with its parent (killed by PID): none is left behind
 * holding the test's namespace and its connections. */
static void die_with_parent(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(0);
}

#define KEEP_MAX 200000 /* connections tcp-keep holds at most */

/* One tcp-keep process's tally, sent to the first one through a pipe. */
struct keep_tally {
	unsigned long long accepted, errors, by_errno[256];
};

static volatile sig_atomic_t keep_stop;

static void on_stop(int sig)
{
	(void)sig;
	keep_stop = 1;
}

static int tcp_keep(const char *port)
{
	/* no SA_RESTART: a signal ends the blocking accept() with EINTR */
	struct sigaction sa = { .sa_handler = on_stop };
	struct keep_tally t = { 0 }, all = { 0 };
	pid_t self = getpid(), *pids;
	rlim_t files;
	int fd, tallies[2], w, workers, i;

	/* Ends with the process that started it, like tcp-serve's workers. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1)
		return 1;
	/* Several processes accept on the socket when one may not hold KEEP_MAX. */
	files = files_up_to(KEEP_MAX + 16);
	workers = files >= KEEP_MAX + 16 ? 1 : (KEEP_MAX + files - 17) / (files - 16);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	fd = listen_on(port);
	pids = calloc(workers, sizeof(*pids));
	if (!pids || pipe(tallies))
		die("pipe");
	for (w = 1; w < workers; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork");
		if (pids[w] == 0) {
			die_with_parent(self);
			break;
		}
	}
	while (!keep_stop) {
		int c = accept(fd, NULL, NULL);

		if (c >= 0) {
			t.accepted++; /* held: never read, never closed */
			continue;
		}
		if (errno == EINTR)
			continue;
		t.errors++;
		t.by_errno[errno & 255]++;
		/* EMFILE, ENFILE, ENOBUFS, ENOMEM leave the connection queued
		 * (for another process): wait for room instead of spinning */
		usleep(10000);
	}
	if (getpid() != self) {
		if (write(tallies[1], &t, sizeof(t)) != sizeof(t))
			_exit(1);
		_exit(0);
	}
	close(tallies[1]);
	for (w = 1; w < workers; w++)
		kill(pids[w], SIGTERM); /* each reports and ends */
	all = t;
	for (w = 1; w < workers; w++) {
		struct pollfd pfd = { .fd = tallies[0], .events = POLLIN };

		/* 2 s: a worker the signal caught just before accept() sleeps on */
		if (poll(&pfd, 1, 2000) != 1 || !read_full(tallies[0], &t, sizeof(t)))
			break;
		all.accepted += t.accepted;
		all.errors += t.errors;
		for (i = 0; i < 256; i++)
			all.by_errno[i] += t.by_errno[i];
	}
	for (i = 1; i < workers; i++)
		kill(pids[i], SIGKILL); /* not reaped yet: the PIDs are still theirs */
	while (wait(NULL) > 0)
		;
	printf("{\"accepted\":%llu,\"errors\":%llu,\"processes\":%d,\"unreported\":%d,\"errno\":", all.accepted,
	       all.errors, workers, workers - w);
	print_errnos(all.by_errno);
	printf("}\n");
	return 0;
}

/* One tcp-serve-idle process: every connection it accepted in one epoll set. */
static void serve_idle_loop(int lfd, rlim_t files)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.fd = lfd }, evs[256];
	unsigned char *got = calloc(files, 1); /* request bytes read per connection (fd) */
	int ep = epoll_create1(0), n, i;

	if (!got || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev))
		die("epoll");
	for (;;) {
		n = epoll_wait(ep, evs, 256, -1);
		for (i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			char buf[64];
			ssize_t r;

			if (fd == lfd) {
				int c;

				while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					struct epoll_event cev = { .events = EPOLLIN, .data.fd = c };

					if ((rlim_t)c >= files || epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev)) {
						close(c);
						continue;
					}
					got[c] = 0;
				}
				if (errno == EMFILE || errno == ENFILE)
					usleep(10000); /* queued for another process: no spinning */
				continue;
			}
			r = recv(fd, buf, sizeof(buf), 0);
			if (r > 0) {
				if (got[fd] < 16 && got[fd] + r >= 16 && send(fd, buf, 16, MSG_DONTWAIT) != 16) {
					close(fd); /* 16 bytes fit any empty send buffer: the peer is gone */
					continue;
				}
				got[fd] = got[fd] + r > 16 ? 16 : got[fd] + r;
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				close(fd); /* the client's FIN or RST */
			}
		}
	}
}

static int tcp_serve_idle(const char *port, int workers)
{
	int lfd = listen_on(port), w, need;
	rlim_t files = files_up_to(KEEP_MAX / (workers > 0 ? workers : 1) + 64);

	if (files <= 64)
		die("RLIMIT_NOFILE");
	need = (int)((KEEP_MAX + files - 65) / (files - 64));
	if (workers < need)
		workers = need;
	if (fcntl(lfd, F_SETFL, O_NONBLOCK))
		die("fcntl");
	for (w = 1; w < workers; w++) {
		if (fork() == 0) {
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1)
				_exit(0);
			break;
		}
	}
	serve_idle_loop(lfd, files);
	return 0;
}

#define HOLD_TIMEOUT_S 3.0
#define HOLD_MAX_NOPORT 1000 /* EADDRNOTAVAIL in a row that end the attempts */

struct hold_slot {
	int fd; /* -1: free */
	double deadline;
};

/* One tcp-hold worker's tally, sent to the parent through a pipe. */
struct hold_tally {
	unsigned long long ok, fail, started, by_errno[256];
	double last_ok; /* when the last connection was established (now_s()) */
};

static void hold_ok(struct hold_tally *t)
{
	t->ok++;
	t->last_ok = now_s();
}

/*
 * What tcp-hold's workers share (a MAP_SHARED page): each attempt is claimed
 * when it starts, so all CONCURRENCY stay in flight until the last one starts
 * (a fixed N/workers each would leave the slowest worker's 3 s timeouts
 * trickling out at its own CONCURRENCY/workers).
 */
struct hold_shared {
	long claimed; /* may pass N: the claims past it start nothing */
	int noport_run; /* EADDRNOTAVAIL in a row, any worker's */
};

static void hold_fail(struct hold_tally *t, int err)
{
	t->fail++;
	t->by_errno[err & 255]++;
}

/*
 * Connections to sa while attempts of the n are left to claim in sh and this
 * worker holds fewer than cap, at most concurrency connects in flight, each
 * given HOLD_TIMEOUT_S. The established ones stay open (out of the epoll set).
 */
static void hold_open(const struct sockaddr_in *sa, struct hold_shared *sh, long n, long cap, int concurrency,
		      struct hold_tally *t)
{
	struct linger abort_close = { .l_onoff = 1, .l_linger = 0 };
	unsigned int any_range = 65535u << 16 | 1; /* high << 16 | low */
	struct epoll_event evs[256];
	struct hold_slot *slots = calloc(concurrency, sizeof(*slots));
	int *free_slots = calloc(concurrency, sizeof(*free_slots));
	int nfree = concurrency, inflight = 0, done = 0, ep, i;

	if (!slots || !free_slots)
		die("calloc");
	for (i = 0; i < concurrency; i++) {
		slots[i].fd = -1;
		free_slots[i] = concurrency - 1 - i;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	while (inflight > 0 || !done) {
		double now, first = 0;
		int k;

		/* Start attempts up to concurrency in flight. */
		while (!done && nfree > 0) {
			struct epoll_event ev = { .events = EPOLLOUT };
			int fd, s;

			if ((long)t->ok + inflight >= cap) {
				done = !inflight; /* full: the other workers take the rest */
				break;
			}
			if (__atomic_load_n(&sh->noport_run, __ATOMIC_RELAXED) >= HOLD_MAX_NOPORT ||
			    __atomic_fetch_add(&sh->claimed, 1, __ATOMIC_RELAXED) >= n) {
				done = 1;
				break;
			}
			t->started++;
			fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				hold_fail(t, errno);
				continue;
			}
			/*
			 * Every close (a timeout, the end) resets: no orphaned
			 * FIN_WAIT sockets (tcp_max_orphans is host-wide), no
			 * TIME_WAIT, and the NAT may free the port at once.
			 */
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
			/*
			 * Any per-socket range (here the widest, cut to the
			 * namespace's) makes connect() search its ports one by
			 * one: without it, once the even ports are taken every
			 * connect() walks all of them first, and 64k
			 * connections cost over a minute of system time.
			 */
			setsockopt(fd, IPPROTO_IP, IP_LOCAL_PORT_RANGE, &any_range, sizeof(any_range));
			if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0) {
				hold_ok(t); /* held */
				__atomic_store_n(&sh->noport_run, 0, __ATOMIC_RELAXED);
				continue;
			}
			/* EADDRNOTAVAIL: no local port left towards sa */
			if (errno == EADDRNOTAVAIL)
				__atomic_fetch_add(&sh->noport_run, 1, __ATOMIC_RELAXED);
			else
				__atomic_store_n(&sh->noport_run, 0, __ATOMIC_RELAXED);
			if (errno != EINPROGRESS) {
				hold_fail(t, errno);
				close(fd);
				continue;
			}
			s = free_slots[--nfree];
			ev.data.u32 = s;
			if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
				die("epoll_ctl");
			slots[s].fd = fd;
			slots[s].deadline = now_s() + HOLD_TIMEOUT_S;
			inflight++;
		}
		if (!inflight)
			continue;

		/* Wait for connects to be decided, at most until the first deadline. */
		for (i = 0; i < concurrency; i++)
			if (slots[i].fd >= 0 && (!first || slots[i].deadline < first))
				first = slots[i].deadline;
		now = now_s();
		k = epoll_wait(ep, evs, sizeof(evs) / sizeof(evs[0]), first > now ? (int)((first - now) * 1e3) + 1 : 0);
		if (k < 0 && errno != EINTR)
			die("epoll_wait");
		for (i = 0; i < k; i++) {
			struct hold_slot *sl = &slots[evs[i].data.u32];
			socklen_t len = sizeof(int);
			int err = 0;

			if (getsockopt(sl->fd, SOL_SOCKET, SO_ERROR, &err, &len))
				err = errno;
			if (!err) {
				hold_ok(t); /* held: out of the epoll set, kept open */
				epoll_ctl(ep, EPOLL_CTL_DEL, sl->fd, NULL);
			} else {
				hold_fail(t, err);
				close(sl->fd);
			}
			sl->fd = -1;
			free_slots[nfree++] = evs[i].data.u32;
			inflight--;
		}

		/* Connects past their time: failed (a lost SYN, a dropped one). */
		now = now_s();
		for (i = 0; i < concurrency; i++) {
			if (slots[i].fd >= 0 && slots[i].deadline <= now) {
				hold_fail(t, ETIMEDOUT);
				close(slots[i].fd);
				slots[i].fd = -1;
				free_slots[nfree++] = i;
				inflight--;
			}
		}
	}
	close(ep);
	free(slots);
	free(free_slots);
}

static int tcp_hold(const char *dst, const char *port, long n, int concurrency)
{
	struct sockaddr_in sa = addr_of(dst, port);
	struct hold_tally t, all = { 0 };
	struct hold_shared *shared;
	pid_t self = getpid(), *pids;
	long files, cap;
	double t0 = now_s();
	int tallies[2], release[2], workers, w, i;
	char buf[256];
	ssize_t r;

	if (n < 1 || n > 1000000 || concurrency < 1 || concurrency > 65536 || concurrency > n) {
		fprintf(stderr, "benchtool: N must be 1..1000000, CONCURRENCY 1..min(N, 65536)\n");
		return 2;
	}
	/*
	 * Workers (one when the file limit allows) open the connections, each
	 * with CONCURRENCY/workers in flight and at most cap held.
	 */
	files = files_up_to(n + concurrency + 64);
	for (workers = 1; workers < concurrency; workers++)
		if (workers * (files - (concurrency + workers - 1) / workers - 64) >= n)
			break;
	cap = files - (concurrency + workers - 1) / workers - 64;
	shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		die("mmap");
	pids = calloc(workers, sizeof(*pids));
	if (!pids || pipe(tallies) || pipe(release))
		die("pipe");
	for (w = 0; w < workers; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork");
		if (pids[w] == 0) {
			memset(&t, 0, sizeof(t));
			die_with_parent(self);
			close(tallies[0]);
			close(release[1]);
			hold_open(&sa, shared, n, cap > 1 ? cap : 1, concurrency / workers + (w < concurrency % workers), &t);
			if (write(tallies[1], &t, sizeof(t)) != sizeof(t))
				_exit(1);
			/* hold until the parent lets go (or dies) */
			while (read(release[0], buf, sizeof(buf)) < 0 && errno == EINTR)
				;
			_exit(0);
		}
	}
	close(tallies[1]);
	close(release[0]);
	for (w = 0; w < workers; w++) {
		if (!read_full(tallies[0], &t, sizeof(t)))
			die("a worker died");
		all.ok += t.ok;
		all.fail += t.fail;
		all.started += t.started;
		if (t.last_ok > all.last_ok)
			all.last_ok = t.last_ok;
		for (i = 0; i < 256; i++)
			all.by_errno[i] += t.by_errno[i];
	}
	printf("{\"ok\":%llu,\"fail\":%llu,\"skipped\":%llu,\"processes\":%d,\"errno\":", all.ok, all.fail,
	       n - all.started, workers);
	print_errnos(all.by_errno);
	printf(",\"last_ok_secs\":%.6f,\"secs\":%.6f}\n", all.ok ? all.last_ok - t0 : 0, now_s() - t0);
	fflush(stdout);

	/* Hold every established connection until stdin reaches EOF. */
	while ((r = read(0, buf, sizeof(buf))) != 0)
		if (r < 0 && errno != EINTR)
			break;
	close(release[1]); /* the workers close their sockets (RST) and end */
	while (wait(NULL) > 0)
		;
	return 0;
}

/* bpf(2) by hand: the machine's libbpf predates TCX. */
static int tcx_attach(const char *prog_pin, const char *dev, const char *hook, const char *link_pin)
{
	union bpf_attr a;
	unsigned int ifindex = if_nametoindex(dev);
	int prog_fd, link_fd;

	if (!ifindex)
		die("if_nametoindex");
	memset(&a, 0, sizeof(a));
	a.pathname = (unsigned long)prog_pin;
	prog_fd = syscall(__NR_bpf, BPF_OBJ_GET, &a, sizeof(a));
	if (prog_fd < 0)
		die("BPF_OBJ_GET");
	memset(&a, 0, sizeof(a));
	a.link_create.prog_fd = prog_fd;
	a.link_create.target_ifindex = ifindex;
	a.link_create.attach_type = strcmp(hook, "ingress") ? 47 /* BPF_TCX_EGRESS */ : 46 /* BPF_TCX_INGRESS */;
	link_fd = syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a));
	if (link_fd < 0 && errno == EINVAL)
		return 3;
	if (link_fd < 0)
		die("BPF_LINK_CREATE");
	memset(&a, 0, sizeof(a));
	a.pathname = (unsigned long)link_pin;
	a.bpf_fd = link_fd;
	if (syscall(__NR_bpf, BPF_OBJ_PIN, &a, sizeof(a)))
		die("BPF_OBJ_PIN");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "udp-send"))
		return udp_send(argv[2], argv[3], atof(argv[4]), atoi(argv[5]));
	if (argc == 3 && !strcmp(argv[1], "udp-sink"))
		return udp_sink(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "tcp-cps"))
		return tcp_cps(argv[2], argv[3], atof(argv[4]));
	if (argc == 3 && !strcmp(argv[1], "tcp-accept"))
		return tcp_accept(argv[2]);
	if (argc == 6 && !strcmp(argv[1], "tcp-churn"))
		return tcp_churn(argv[2], argv[3], atof(argv[4]), atoi(argv[5]));
	if (argc == 4 && !strcmp(argv[1], "tcp-serve"))
		return tcp_serve(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "tcp-serve-idle"))
		return tcp_serve_idle(argv[2], atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "tcp-keep"))
		return tcp_keep(argv[2]);
	if (argc == 6 && !strcmp(argv[1], "tcp-hold"))
		return tcp_hold(argv[2], argv[3], atol(argv[4]), atoi(argv[5]));
	if (argc == 6 && !strcmp(argv[1], "tcx-attach"))
		return tcx_attach(argv[2], argv[3], argv[4], argv[5]);
	fprintf(stderr, "usage: benchtool udp-send DST PORT SECS LEN | udp-sink PORT |\n"
			"                 tcp-cps DST PORT SECS | tcp-accept PORT |\n"
			"                 tcp-churn DST PORT SECS WORKERS | tcp-serve PORT WORKERS |\n"
			"                 tcp-serve-idle PORT WORKERS |\n"
			"                 tcp-keep PORT | tcp-hold DST PORT N CONCURRENCY |\n"
			"                 tcx-attach PROG DEV ingress|egress LINK\n");
	return 2;
}
