/* Spends about 70% of its CPU in hot_a and 30% in hot_b, both called from
 * main, for argv[1] seconds (default 10). Built -O2 -g -fno-omit-frame-pointer. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void hot_a(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		sink += i * 7;
}

__attribute__((noinline)) void hot_b(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		sink += i * 3;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	double end = now() + seconds;
	/* Same loop body in both: the split of iterations is the split of time. */
	while (now() < end) {
		hot_a(700000);
		hot_b(300000);
	}
	return 0;
}
