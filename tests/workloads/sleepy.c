/* A thread that sleeps 5 x 200 ms inside sleepy(), after argv[1] s (default 0.5). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "raw_syscall.h"
#include "delay.h"

__attribute__((noinline)) void sleepy(void)
{
	struct timespec ts = {0, 200 * 1000 * 1000};
	for (int i = 0; i < 5; i++)
		raw_syscall3(SYS_nanosleep, (long)&ts, 0, 0);
}

static void *run(void *arg)
{
	(void)arg;
	sleepy();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	wait_delay_arg(argc, argv);
	pthread_create(&t, NULL, run, NULL);
	pthread_join(t, NULL);
	return 0;
}
