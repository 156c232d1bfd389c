/* A thread waiting in pthread_cond_wait() from wait_for_signal() (called by
 * waiter_thread()), signalled by main every ~50 ms for argv[1] s (default
 * 10). Built without frame pointers. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int signalled, done;

__attribute__((noinline, noclone)) int wait_for_signal(void)
{
	int over;
	pthread_mutex_lock(&lock);
	while (!signalled && !done)
		pthread_cond_wait(&cond, &lock);
	signalled = 0;
	over = done;
	pthread_mutex_unlock(&lock);
	return over;
}

static void *waiter_thread(void *arg)
{
	(void)arg;
	while (!wait_for_signal())
		;
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	struct timespec tick = {0, 50 * 1000 * 1000};
	pthread_t t;
	pthread_create(&t, NULL, waiter_thread, NULL);
	for (int i = 0; i < seconds * 20; i++) {
		nanosleep(&tick, NULL);
		pthread_mutex_lock(&lock);
		signalled = 1;
		pthread_cond_signal(&cond);
		pthread_mutex_unlock(&lock);
	}
	pthread_mutex_lock(&lock);
	done = 1;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(t, NULL);
	return 0;
}
