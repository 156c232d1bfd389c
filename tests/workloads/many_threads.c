/* argv[2] threads (default 200, at most 200) that each spin for argv[1]
 * seconds: more distinct (thread, stack) keys a second than a small counts
 * map holds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;
static volatile int stop;

__attribute__((noinline)) static void thread_work(void)
{
	for (unsigned long i = 0; i < 100000; i++)
		sink += i;
}

static void *worker(void *arg)
{
	(void)arg;
	while (!stop)
		thread_work();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[200];
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	int n = argc > 2 ? atoi(argv[2]) : 200;
	struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	if (n < 1 || n > 200)
		n = 200;
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	nanosleep(&ts, NULL);
	stop = 1;
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("%lu\n", sink);
	return 0;
}
