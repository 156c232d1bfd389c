/* Faults in fresh 4 KiB pages (mmap, touch, munmap 16 MiB at a time) for
 * argv[1] s (default 5) and prints faults per second: a fault-heavy
 * benchmark workload. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define CHUNK (16UL << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	unsigned long faults = 0;
	double start = now(), end = start + seconds;
	while (now() < end) {
		volatile char *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		madvise((void *)p, CHUNK, MADV_NOHUGEPAGE);
		for (unsigned long off = 0; off < CHUNK; off += 4096)
			p[off] = 1;
		munmap((void *)p, CHUNK);
		faults += CHUNK / 4096;
	}
	printf("%.0f\n", faults / (now() - start));
	return 0;
}
