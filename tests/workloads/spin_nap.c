/* Alternates argv[2] ms (default 100) busy in spin() and argv[3] ms (default
 * 100) asleep in nanosleep() from nap(), for argv[1] s. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double spin_s = 0.1;
static long nap_ms = 100;

__attribute__((noinline)) void spin(void)
{
	double end = now() + spin_s;
	while (now() < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

__attribute__((noinline)) void nap(void)
{
	struct timespec ts = {nap_ms / 1000, (nap_ms % 1000) * 1000 * 1000};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	if (argc > 2)
		spin_s = atof(argv[2]) / 1000;
	if (argc > 3)
		nap_ms = atol(argv[3]);
	double end = now() + seconds;
	while (now() < end) {
		spin();
		nap();
	}
	return 0;
}
