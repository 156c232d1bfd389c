/* A thread that sleeps 8000 times for 20 us in nanosleep() from short_naps(), after
 * argv[1] s, and writes to the file argv[2] the wall time those sleeps took
 * and the thread's CPU time within it, in us: blocks much shorter than
 * emberd's sampling threshold, with bounds on the truth to compare the sampled
 * estimate against. Each sleep also runs ~20 us on CPU on a VM (syscall, timer
 * set-up, the scheduler and its hooks), so its off-CPU time lies between wall
 * minus CPU time and wall time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "delay.h"

static double wall_us, cpu_us;

static double now_us(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

__attribute__((noinline)) void short_naps(void)
{
	struct timespec ts = {0, 20 * 1000};
	for (int i = 0; i < 8000; i++) {
		double wall = now_us(CLOCK_MONOTONIC);
		double cpu = now_us(CLOCK_THREAD_CPUTIME_ID);
		nanosleep(&ts, NULL);
		cpu_us += now_us(CLOCK_THREAD_CPUTIME_ID) - cpu;
		wall_us += now_us(CLOCK_MONOTONIC) - wall;
	}
}

static void *napper_thread(void *arg)
{
	(void)arg;
	short_naps();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	wait_delay_arg(argc, argv);
	pthread_create(&t, NULL, napper_thread, NULL);
	pthread_join(t, NULL);
	if (argc > 2) {
		FILE *f = fopen(argv[2], "w");
		if (!f || fprintf(f, "%.0f %.0f\n", wall_us, cpu_us) < 0 || fclose(f))
			return 1;
	}
	return 0;
}
