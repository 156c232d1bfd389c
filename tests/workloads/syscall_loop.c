/* A syscall-heavy loop: writes to /dev/null from write_loop for argv[1] seconds,
 * so most samples land in the kernel, above user frames. */
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void write_loop(int fd, double end)
{
	char buf[4096] = {0};
	struct timespec ts;
	do {
		for (int i = 0; i < 1000; i++)
			if (write(fd, buf, sizeof(buf)) < 0)
				exit(1);
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	struct timespec ts;
	int fd = open("/dev/null", O_WRONLY);
	if (fd < 0)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	write_loop(fd, ts.tv_sec + ts.tv_nsec / 1e9 + seconds);
	return 0;
}
