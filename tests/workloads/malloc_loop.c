/* Small allocations in a tight loop for argv[1] s (default 2): malloc of 16
 * to 512 bytes, each freed 64 allocations later; prints the allocations of
 * each second as it ends, one line a second. The malloc benchmark's
 * workload (a long run is traced and untraced in turn). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RING 64

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void churn(double secs)
{
	void *ring[RING] = {0};
	unsigned long n = 0, seed = 1, last_n = 0;
	double start = now(), next = start + 1, t;

	while ((t = now()) < start + secs) {
		for (int i = 0; i < 1000; i++, n++) {
			seed = seed * 6364136223846793005UL + 1;
			free(ring[n % RING]);
			ring[n % RING] = malloc(16 + (seed >> 33) % 497);
		}
		if (t >= next) {
			printf("%lu\n", n - last_n);
			fflush(stdout);
			last_n = n;
			next += 1;
		}
	}
	for (int i = 0; i < RING; i++)
		free(ring[i]);
}

int main(int argc, char **argv)
{
	churn(argc > 1 ? atof(argv[1]) : 2);
	return 0;
}
