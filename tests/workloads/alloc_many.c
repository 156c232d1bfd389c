/* After argv[1] s (default 0.5), alloc_many() mallocs 100,000 x 1 KiB and
 * frees every second one; alloc_mixed() calls calloc, posix_memalign and
 * realloc (see there); then the process holds the rest for argv[2] s
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

#define MIXED 2000

static void *mixed[3][MIXED];

/* Kept: 2000 x calloc(1, 4096), 2000 x posix_memalign(64, 4096), and 2000
 * blocks malloc'ed at 1024 bytes then realloc'ed to 4096. Allocated: 8 MB
 * by each of calloc, posix_memalign and realloc, 2 MB by malloc (freed by
 * the realloc, moved or grown in place); in use: 24 MB (24,576,000 bytes). */
__attribute__((noinline)) int alloc_mixed(void)
{
	for (int i = 0; i < MIXED; i++) {
		mixed[0][i] = calloc(1, 4096);
		if (posix_memalign(&mixed[1][i], 64, 4096))
			return -1;
		mixed[2][i] = malloc(1024);
		mixed[2][i] = realloc(mixed[2][i], 4096);
		if (!mixed[0][i] || !mixed[2][i])
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	double hold = argc > 2 ? atof(argv[2]) : 3;
	struct timespec d = {(time_t)hold, (long)((hold - (time_t)hold) * 1e9)};

	wait_delay_arg(argc, argv);
	if (alloc_many() || alloc_mixed()) {
		perror("malloc");
		return 1;
	}
	nanosleep(&d, NULL);
	return 0;
}
