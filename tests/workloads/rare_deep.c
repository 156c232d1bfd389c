/* A process whose rare stacks are very deep, as a compiler's or a
 * recursive-descent parser's are: every 50 ms it descends 150-199 calls
 * (descend -> descend -> ...) and spins about a millisecond at the bottom,
 * then sleeps. On a busy host its few samples are thin towers, taller than
 * anything else in the graph, until argv[1] s (default 30) have passed.
 *
 * About 2% of a CPU: beside one spinning process the towers are some 25 px
 * of a 1,180 px graph, well under the 63 px a graph keeps whole (the
 * renderers' READABLE_PX). At one nap of 20 ms (4.8%, 57 px) a phase of
 * the animation where the spinner got less of its CPU made them readable,
 * and the animation rightly drew them whole (CI run of 0a43464). */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static volatile unsigned long sink;

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

static void spin_us(long us)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 1000; i++)
			sink++;
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

/* noinline and the work after the call keep each level a real frame (built
 * by clang, which has no noclone). */
__attribute__((noinline)) void descend(int left)
{
	if (left == 0)
		spin_us(1000);
	else
		descend(left - 1);
	sink += left;
}

int main(int argc, char **argv)
{
	signal(SIGALRM, on_alarm);
	alarm(argc > 1 ? atoi(argv[1]) : 30);
	srand(getpid());
	const struct timespec nap = { 0, 50 * 1000 * 1000 };
	while (!stop) {
		descend(150 + rand() % 50);
		nanosleep(&nap, NULL);
	}
	return 0;
}
