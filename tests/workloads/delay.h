/* The workloads wait before their work so that the recorder started with
 * them is attached by then: until the file named by EMBERD_TEST_GO exists,
 * when it is set (the test creates it once `emberd record` says it is
 * attached: tests/common's record_attached), or else argv[1] seconds
 * (default 0.5). */
#ifndef DELAY_H
#define DELAY_H
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void wait_delay_arg(int argc, char **argv)
{
	const char *go = getenv("EMBERD_TEST_GO");
	double s = argc > 1 ? atof(argv[1]) : 0.5;
	struct timespec d = {(time_t)s, (long)((s - (time_t)s) * 1e9)};

	if (go && *go) {
		struct timespec poll = {0, 10 * 1000 * 1000};

		while (access(go, F_OK) != 0)
			nanosleep(&poll, NULL);
		return;
	}
	nanosleep(&d, NULL);
}
#endif
