/* Alternates 100 ms busy in spin() and 100 ms asleep in nanosleep() from nap(),
 * for argv[1] s. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin(void)
{
	double end = now() + 0.1;
	while (now() < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

__attribute__((noinline)) void nap(void)
{
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	double end = now() + seconds;
	while (now() < end) {
		spin();
		nap();
	}
	return 0;
}
