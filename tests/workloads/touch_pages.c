/* Touches 64 MiB of fresh memory, one byte per 4 KiB page, in touch_pages(),
 * after argv[1] s (default 0.5); then waits a moment before exiting. */
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include "delay.h"

#define SIZE (64UL << 20)

__attribute__((noinline)) void touch_pages(volatile char *p)
{
	for (unsigned long off = 0; off < SIZE; off += 4096)
		p[off] = 1;
}

int main(int argc, char **argv)
{
	struct timespec after = {0, 300 * 1000 * 1000};
	char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	/* 4 KiB pages, so one fault per page whatever the THP setting. */
	madvise(p, SIZE, MADV_NOHUGEPAGE);
	wait_delay_arg(argc, argv);
	touch_pages(p);
	nanosleep(&after, NULL);
	return 0;
}
