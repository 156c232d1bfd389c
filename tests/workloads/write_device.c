/* Writes the block device argv[1] with O_DIRECT for argv[2] s: write_blocks()
 * writes its first 16 MiB in 64 KiB pwrite()s, again and again. For block
 * I/O on a device with no file system, such as null_blk in the kernel
 * matrix (scripts/kernels). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64L << 10)
#define SPAN (16L << 20)

__attribute__((noinline)) int write_blocks(int fd, char *buf)
{
	for (long off = 0; off < SPAN; off += CHUNK)
		if (pwrite(fd, buf, CHUNK, off) != CHUNK)
			return -1;
	return 0;
}

int main(int argc, char **argv)
{
	time_t end;
	char *buf;
	int fd;

	if (argc < 3)
		return 2;
	fd = open(argv[1], O_WRONLY | O_DIRECT);
	if (fd < 0 || posix_memalign((void **)&buf, 4096, CHUNK)) {
		perror(argv[1]);
		return 1;
	}
	memset(buf, 'x', CHUNK);
	end = time(NULL) + atoi(argv[2]);
	while (time(NULL) < end)
		if (write_blocks(fd, buf)) {
			perror("pwrite");
			return 1;
		}
	close(fd);
	return 0;
}
