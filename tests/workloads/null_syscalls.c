/* getppid() through libc in a tight loop for argv[1] s (default 1); prints
 * syscalls per second: the worst case for hooks that run on every syscall. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1, t;
	unsigned long n = 0;
	struct timespec ts, start;

	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		for (int i = 0; i < 1000; i++, n++)
			getppid();
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t = (ts.tv_sec - start.tv_sec) + (ts.tv_nsec - start.tv_nsec) / 1e9;
	} while (t < secs);
	printf("%.0f\n", n / t);
	return 0;
}
