/* Maps 3 x 16 MiB of anonymous memory in map_arena(), after argv[1] s
 * (default 0.5), and one file in map_file(); then waits before exiting. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "delay.h"

#define ARENA (16UL << 20)

__attribute__((noinline)) int map_arena(void **out)
{
	for (int i = 0; i < 3; i++) {
		out[i] = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (out[i] == MAP_FAILED)
			return -1;
	}
	return 0;
}

/* Maps the whole file at `path` (the workload itself) read-only. */
__attribute__((noinline)) void *map_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	void *p;

	if (fd < 0)
		return MAP_FAILED;
	*len = (size_t)lseek(fd, 0, SEEK_END);
	p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	return p;
}

int main(int argc, char **argv)
{
	struct timespec after = {0, 300 * 1000 * 1000};
	void *arena[3];
	size_t len = 0;

	wait_delay_arg(argc, argv);
	if (map_arena(arena) || map_file(argv[0], &len) == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (int i = 0; i < 3; i++)
		munmap(arena[i], ARENA);
	nanosleep(&after, NULL);
	return 0;
}
