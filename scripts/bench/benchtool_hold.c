// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * benchtool's connection holders: tcp-keep (accept and keep every connection),
 * tcp-serve-idle (serve many connections at once, idle ones held open) and
 * tcp-hold (a greedy client). What each does: benchtool.c's opening comment.
 */
#include "benchtool.h"

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

int tcp_keep(const char *port)
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

int tcp_serve_idle(const char *port, int workers)
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

int tcp_hold(const char *dst, const char *port, long n, int concurrency)
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
