/* A process whose second thread naps 500 us, then execs the program again,
 * argv[1] times in all (default 2000): after each exec the napping thread
 * is the process's only thread, under the process id, and its own thread
 * id is gone. A user doing this leaves no off-CPU state behind in the
 * bounded form's table of thread ids (issue 41). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long left;

static void *napper(void *arg)
{
	struct timespec ts = {0, 500 * 1000};
	char n[32];

	(void)arg;
	nanosleep(&ts, NULL);
	snprintf(n, sizeof(n), "%ld", left - 1);
	execl("/proc/self/exe", "exec_loop", n, (char *)NULL);
	perror("exec_loop: execl");
	exit(1);
}

int main(int argc, char **argv)
{
	pthread_t t;

	left = argc > 1 ? atol(argv[1]) : 2000;
	if (left <= 0)
		return 0;
	pthread_create(&t, NULL, napper, NULL);
	pthread_join(t, NULL); /* ended by the exec */
	return 1;
}
