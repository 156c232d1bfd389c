/* Two threads ping-pong one byte over two pipes for argv[1] s (default 5) and
 * print round trips per second: a context-switch-heavy benchmark workload.
 * The threads are pinned to CPUs 0 and 1: left to the scheduler they share a
 * CPU in some runs and not in others, which changes the rate fourfold and
 * would swamp what the benchmark measures. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static volatile int done;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu % sysconf(_SC_NPROCESSORS_ONLN), &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *pong(void *arg)
{
	char c;
	(void)arg;
	pin(1);
	while (read(ab[0], &c, 1) == 1 && c != 'q')
		if (write(ba[1], &c, 1) != 1)
			break;
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	unsigned long rounds = 0;
	pthread_t t;
	char c = 'x';
	if (pipe(ab) || pipe(ba))
		return 1;
	pin(0);
	pthread_create(&t, NULL, pong, NULL);
	double start = now(), end = start + seconds;
	while (now() < end) {
		for (int i = 0; i < 1000; i++) {
			if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
				return 1;
		}
		rounds += 1000;
	}
	c = 'q';
	if (write(ab[1], &c, 1) != 1)
		return 1;
	pthread_join(t, NULL);
	printf("%.0f\n", rounds / (now() - start));
	return 0;
}
