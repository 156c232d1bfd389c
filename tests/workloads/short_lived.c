/* Runs its hot loop in short_lived_hot for argv[1] seconds (default 1), then
 * exits: its frames must still be named in a profile taken over that time. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void short_lived_hot(double end)
{
	struct timespec ts;
	do {
		for (unsigned long i = 0; i < 100000; i++)
			sink += i;
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	short_lived_hot(ts.tv_sec + ts.tv_nsec / 1e9 + seconds);
	return 0;
}
