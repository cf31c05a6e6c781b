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
 * The connection holders (tcp-keep, tcp-serve-idle, tcp-hold) are in
 * benchtool_hold.c; build both: gcc -O2 -Wall -o benchtool benchtool.c benchtool_hold.c
 *
 * Why not iperf3 / python for these: iperf3 -u writes one datagram per syscall
 * and reads the clock per packet, and a python connect loop spends more time in
 * the interpreter than in the kernel; either way the tool, not the forwarding
 * path under test, would set the ceiling. Here the per-packet cost outside the
 * path is one slot of a 64-message sendmmsg(), and the per-connection cost is
 * three syscalls.
 */
#include "benchtool.h"

#define BATCH 64
#define MAX_LEN 9000

double now_s(void)
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
double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void die(const char *what)
{
	fprintf(stderr, "benchtool: %s: %s\n", what, strerror(errno));
	exit(1);
}

struct sockaddr_in addr_of(const char *ip, const char *port)
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
int listen_on(const char *port)
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
rlim_t files_up_to(rlim_t want)
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
void print_errnos(const unsigned long long *by_errno)
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
int read_full(int fd, void *buf, size_t len)
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
void die_with_parent(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(0);
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
