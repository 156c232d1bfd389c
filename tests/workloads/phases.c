/* Two phases, as a program whose work changes over time: for argv[1]
 * seconds (default 10) mostly in phase_one(), then for argv[2] seconds
 * (default 10) mostly in phase_two(), a function never called before. About
 * a tenth of each phase is spent in common(). Every round also calls libc
 * (memset, clock_gettime), as real programs do.
 *
 * With argv[3] (a file name), a tail follows: common() for about two
 * seconds, but for 200 ms starting 300 ms into a wall-clock second only
 * burst(); the burst's start and end (unix ms, CLOCK_REALTIME) are written
 * to the file. */
#include <stdio.h>
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

__attribute__((noinline)) void burst(unsigned long n)
{
	memset(buf, (int)n, sizeof buf);
	for (unsigned long i = 0; i < n; i++)
		sink += i * 11;
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void tail(const char *path)
{
	double start, end;
	FILE *f;

	/* common() up to 300 ms into the next wall-clock second but one. */
	start = (double)(long)wall() + 1.3;
	while (wall() < start)
		common(100000);
	start = wall();
	end = start + 0.2;
	while (wall() < end)
		burst(100000);
	end = wall();
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fprintf(f, "%.0f %.0f\n", start * 1000, end * 1000);
	fclose(f);
	/* The rest of the burst's second, and one more, in common(). */
	end = (double)(long)end + 2;
	while (wall() < end)
		common(100000);
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
	if (argc > 3)
		tail(argv[3]);
	return 0;
}
