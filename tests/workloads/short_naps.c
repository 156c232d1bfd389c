/* A thread that sleeps 8000 times for 20 us inside short_naps(), after
 * argv[1] s, and writes the wall time those sleeps took, in us, to the file
 * argv[2]: blocks much shorter than emberd's sampling threshold, with the
 * truth to compare the sampled estimate against. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "raw_syscall.h"
#include "delay.h"

static double slept_us;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

__attribute__((noinline)) void short_naps(void)
{
	struct timespec ts = {0, 20 * 1000};
	for (int i = 0; i < 8000; i++) {
		double t0 = now_us();
		raw_syscall3(SYS_nanosleep, (long)&ts, 0, 0);
		slept_us += now_us() - t0;
	}
}

static void *run(void *arg)
{
	(void)arg;
	short_naps();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	wait_delay_arg(argc, argv);
	pthread_create(&t, NULL, run, NULL);
	pthread_join(t, NULL);
	if (argc > 2) {
		FILE *f = fopen(argv[2], "w");
		if (!f || fprintf(f, "%.0f\n", slept_us) < 0 || fclose(f))
			return 1;
	}
	return 0;
}
