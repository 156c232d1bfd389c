/* After argv[1] s (default 0.5), alloc_many() mallocs 100,000 x 1 KiB and
 * frees every second one; then the process holds the rest for argv[2] s
 * (default 3) before exiting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "delay.h"

#define COUNT 100000
#define SIZE 1024

static void *blocks[COUNT];

__attribute__((noinline)) int alloc_many(void)
{
	for (int i = 0; i < COUNT; i++) {
		blocks[i] = malloc(SIZE);
		if (!blocks[i])
			return -1;
		memset(blocks[i], i, 16);
	}
	for (int i = 0; i < COUNT; i += 2) {
		free(blocks[i]);
		blocks[i] = NULL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	double hold = argc > 2 ? atof(argv[2]) : 3;
	struct timespec d = {(time_t)hold, (long)((hold - (time_t)hold) * 1e9)};

	wait_delay_arg(argc, argv);
	if (alloc_many()) {
		perror("malloc");
		return 1;
	}
	nanosleep(&d, NULL);
	return 0;
}
