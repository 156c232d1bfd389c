/* After argv[1] s, write_direct() writes 64 MiB with O_DIRECT to the file
 * argv[2] (on a disk, not tmpfs) in 1 MiB pwrite()s, timing each; the sum of
 * their latencies in us is written to argv[3]. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "delay.h"

#define CHUNK (1L << 20)
#define TOTAL (64L << 20)

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

__attribute__((noinline)) double write_direct(int fd, char *buf)
{
	double total = 0;

	for (long off = 0; off < TOTAL; off += CHUNK) {
		double t0 = now_us();

		if (pwrite(fd, buf, CHUNK, off) != CHUNK)
			return -1;
		total += now_us() - t0;
	}
	return total;
}

int main(int argc, char **argv)
{
	char *buf;
	double us;
	FILE *out;
	int fd;

	if (argc < 4)
		return 2;
	fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	if (fd < 0 || posix_memalign((void **)&buf, 4096, CHUNK)) {
		perror(argv[2]);
		return 1;
	}
	memset(buf, 'x', CHUNK);
	/* Allocated up front, so the writes are data only, not extent changes. */
	if (fallocate(fd, 0, 0, TOTAL)) {
		perror("fallocate");
		return 1;
	}
	fsync(fd);
	wait_delay_arg(argc, argv);
	us = write_direct(fd, buf);
	if (us < 0) {
		perror("pwrite");
		return 1;
	}
	close(fd);
	unlink(argv[2]);
	out = fopen(argv[3], "w");
	if (!out)
		return 1;
	fprintf(out, "%.0f\n", us);
	fclose(out);
	return 0;
}
