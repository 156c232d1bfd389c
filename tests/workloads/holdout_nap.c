/* Sleeps argv[1] times (default 4) for argv[2] ms (default 250) in
 * nanosleep() called from holdout_nap(), right after it starts: its first
 * block comes before any profiler could have read its mappings, so that
 * block's stack shows whether a new process's stacks are true from the
 * start. */
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) void holdout_nap(int n, long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};

	for (int i = 0; i < n; i++)
		nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	holdout_nap(argc > 1 ? atoi(argv[1]) : 4, argc > 2 ? atol(argv[2]) : 250);
	return 0;
}
