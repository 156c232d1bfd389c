/* Two phases, as a program whose work changes over time: for argv[1]
 * seconds (default 10) mostly in phase_one(), then for argv[2] seconds
 * (default 10) mostly in phase_two(), a function never called before. About
 * a tenth of each phase is spent in common(). Every round also calls libc
 * (memset, clock_gettime), as real programs do. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;
static char buf[256];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void common(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		sink += i ^ 5;
}

__attribute__((noinline)) void phase_one(unsigned long n)
{
	memset(buf, (int)n, sizeof buf);
	for (unsigned long i = 0; i < n; i++)
		sink += i * 7;
}

__attribute__((noinline)) void phase_two(unsigned long n)
{
	memset(buf, (int)n, sizeof buf);
	for (unsigned long i = 0; i < n; i++)
		sink += i * 3;
}

int main(int argc, char **argv)
{
	double one = argc > 1 ? atof(argv[1]) : 10;
	double two = argc > 2 ? atof(argv[2]) : 10;
	double end = now() + one;
	while (now() < end) {
		phase_one(900000);
		common(100000);
	}
	end = now() + two;
	while (now() < end) {
		phase_two(900000);
		common(100000);
	}
	return 0;
}
