/* The workloads wait argv[1] seconds (default 0.5) before their work, so
 * that the recorder started with them is attached by then. */
#ifndef DELAY_H
#define DELAY_H
#include <stdlib.h>
#include <time.h>

static void wait_delay_arg(int argc, char **argv)
{
	double s = argc > 1 ? atof(argv[1]) : 0.5;
	struct timespec d = {(time_t)s, (long)((s - (time_t)s) * 1e9)};

	nanosleep(&d, NULL);
}
#endif
