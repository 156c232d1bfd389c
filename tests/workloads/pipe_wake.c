/* Two threads, ten rounds: one blocks in read() on a pipe from wait_for_data(),
 * the other sleeps 100 ms in nanosleep() and then write()s from producer(). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "delay.h"

static int fds[2];

__attribute__((noinline)) void wait_for_data(void)
{
	char c;
	for (int i = 0; i < 10; i++)
		if (read(fds[0], &c, 1) != 1)
			exit(1);
}

__attribute__((noinline)) void producer(void)
{
	struct timespec ts = {0, 100 * 1000 * 1000};
	for (int i = 0; i < 10; i++) {
		nanosleep(&ts, NULL);
		if (write(fds[1], "x", 1) != 1)
			exit(1);
	}
}

static void *consumer_main(void *arg)
{
	(void)arg;
	wait_for_data();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (pipe(fds))
		return 1;
	wait_delay_arg(argc, argv);
	pthread_create(&t, NULL, consumer_main, NULL);
	producer();
	pthread_join(t, NULL);
	return 0;
}
