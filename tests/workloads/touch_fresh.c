/* main -> fault_in() -> touch(): for argv[1] s (default 10), maps 16 MiB,
 * touch() writes one byte per 4 KiB page (a page fault each), unmaps. Built
 * without frame pointers. */
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

__attribute__((noinline, noclone)) void touch(volatile char *p)
{
	for (unsigned long off = 0; off < CHUNK; off += 4096)
		p[off] = 1;
}

__attribute__((noinline, noclone)) int fault_in(double seconds)
{
	double end = now() + seconds;
	while (now() < end) {
		char *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		madvise(p, CHUNK, MADV_NOHUGEPAGE);
		touch(p);
		munmap(p, CHUNK);
	}
	return 0;
}

int main(int argc, char **argv)
{
	/* Not a tail call: main stays on the stack. */
	volatile int rc = fault_in(argc > 1 ? atof(argv[1]) : 10);
	return rc;
}
