/* argv[1] threads (default 16), each blocking again and again for 20 ms at
 * one of 4096 distinct stacks (a random path of 12 calls through left() and
 * right()), for argv[2] s (default 30): a user making the off-CPU stack map
 * hold as many of their stacks as they can. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;
static time_t until;

static void step(unsigned bits, int depth);

__attribute__((noinline)) void left(unsigned bits, int depth)
{
	step(bits >> 1, depth - 1);
	sink++;
}

__attribute__((noinline)) void right(unsigned bits, int depth)
{
	step(bits >> 1, depth - 1);
	sink += 2;
}

__attribute__((noinline)) static void step(unsigned bits, int depth)
{
	struct timespec ts = {0, 20 * 1000 * 1000};

	if (depth == 0) {
		nanosleep(&ts, NULL);
		return;
	}
	if (bits & 1)
		left(bits, depth);
	else
		right(bits, depth);
	sink++;
}

static void *blocker(void *arg)
{
	unsigned seed = (unsigned)(unsigned long)arg;

	while (time(NULL) < until)
		step((unsigned)rand_r(&seed), 12);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 16;
	pthread_t t[256];

	if (n < 1 || n > 256)
		n = 16;
	until = time(NULL) + (argc > 2 ? atoi(argv[2]) : 30);
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, blocker, (void *)(unsigned long)(i * 7919 + 1));
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
