/* Small allocations in a tight loop for argv[1] s (default 2): malloc of 16
 * to 512 bytes, each freed 64 allocations later; prints allocations per
 * second. The malloc benchmark's workload. */
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

__attribute__((noinline)) unsigned long churn(double secs)
{
	void *ring[RING] = {0};
	unsigned long n = 0, seed = 1;
	double end = now() + secs;

	while (now() < end) {
		for (int i = 0; i < 1000; i++, n++) {
			seed = seed * 6364136223846793005UL + 1;
			free(ring[n % RING]);
			ring[n % RING] = malloc(16 + (seed >> 33) % 497);
		}
	}
	for (int i = 0; i < RING; i++)
		free(ring[i]);
	return n;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;

	printf("%.0f\n", churn(secs) / secs);
	return 0;
}
