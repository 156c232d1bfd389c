/* An fio-style loop: 4 KiB O_DIRECT writes at random offsets of a 64 MiB
 * file argv[2] (on a disk) for argv[1] s; prints writes per second. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIZE (64L << 20)
#define BLOCK 4096

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2, t;
	struct timespec ts, start;
	unsigned long n = 0, seed = 7;
	char *buf;
	int fd;

	if (argc < 3)
		return 2;
	fd = open(argv[2], O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd < 0 || posix_memalign((void **)&buf, BLOCK, BLOCK) || fallocate(fd, 0, 0, SIZE)) {
		perror(argv[2]);
		return 1;
	}
	memset(buf, 'y', BLOCK);
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		seed = seed * 6364136223846793005UL + 1;
		if (pwrite(fd, buf, BLOCK, (long)((seed >> 33) % (SIZE / BLOCK)) * BLOCK) != BLOCK) {
			perror("pwrite");
			return 1;
		}
		n++;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t = (ts.tv_sec - start.tv_sec) + (ts.tv_nsec - start.tv_nsec) / 1e9;
	} while (t < secs);
	close(fd);
	printf("%.0f\n", n / t);
	return 0;
}
