/* Grows the heap's break by 64 MiB with sbrk() in grow_heap(), after argv[1]
 * s (default 0.5); then waits a moment before exiting. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "delay.h"

__attribute__((noinline)) void *grow_heap(void)
{
	/* 4 x 16 MiB, as an allocator grows its arena. */
	void *first = sbrk(16 << 20);

	for (int i = 0; i < 3; i++)
		if (sbrk(16 << 20) == (void *)-1)
			return NULL;
	return first;
}

int main(int argc, char **argv)
{
	struct timespec after = {0, 300 * 1000 * 1000};

	wait_delay_arg(argc, argv);
	if (grow_heap() == (void *)-1) {
		perror("sbrk");
		return 1;
	}
	nanosleep(&after, NULL);
	return 0;
}
