/* After argv[1] s, write_direct() writes 64 MiB with O_DIRECT to the file
 * argv[2] (on a disk, not tmpfs) in 1 MiB pwrite()s, timing each. Written to
 * argv[3], one line: the sum of the pwrite()s' latencies in us, then what the
 * kernel's own disk statistics (/sys/dev/block/MAJ:MIN/stat, iostat's
 * source) say of the disk's writes during write_direct(): the time its write
 * requests took, summed, in ms, and how many completed. The disk figure is
 * the block layer's time alone; a pwrite() also pins the buffer, and waits to
 * be scheduled after the completion, which a busy machine stretches. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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

/* Writes completed and ms spent on writes (fields 5 and 8) of the disk
 * statistics at path; 0 on success. */
static int disk_writes(const char *path, unsigned long long *ios,
		       unsigned long long *ms)
{
	unsigned long long f[8];
	FILE *st = fopen(path, "r");
	int n;

	if (!st)
		return -1;
	n = fscanf(st, "%llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1],
		   &f[2], &f[3], &f[4], &f[5], &f[6], &f[7]);
	fclose(st);
	if (n != 8)
		return -1;
	*ios = f[4];
	*ms = f[7];
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long long ios0, ms0, ios1, ms1;
	char stat_path[64];
	struct stat sb;
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
	if (fstat(fd, &sb)) {
		perror("fstat");
		return 1;
	}
	snprintf(stat_path, sizeof(stat_path), "/sys/dev/block/%u:%u/stat",
		 major(sb.st_dev), minor(sb.st_dev));
	wait_delay_arg(argc, argv);
	if (disk_writes(stat_path, &ios0, &ms0)) {
		perror(stat_path);
		return 1;
	}
	us = write_direct(fd, buf);
	if (us < 0) {
		perror("pwrite");
		return 1;
	}
	if (disk_writes(stat_path, &ios1, &ms1)) {
		perror(stat_path);
		return 1;
	}
	close(fd);
	unlink(argv[2]);
	out = fopen(argv[3], "w");
	if (!out)
		return 1;
	fprintf(out, "%.0f %llu %llu\n", us, ms1 - ms0, ios1 - ios0);
	fclose(out);
	return 0;
}
