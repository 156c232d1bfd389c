/* A thread that sleeps 5 x 200 ms in nanosleep() called from sleepy(), after
 * argv[1] s (default 0.5). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "delay.h"

__attribute__((noinline)) void sleepy(void)
{
	struct timespec ts = {0, 200 * 1000 * 1000};
	for (int i = 0; i < 5; i++)
		nanosleep(&ts, NULL);
}

static void *sleeper_thread(void *arg)
{
	(void)arg;
	sleepy();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	wait_delay_arg(argc, argv);
	pthread_create(&t, NULL, sleeper_thread, NULL);
	pthread_join(t, NULL);
	return 0;
}
