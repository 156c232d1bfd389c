/* Code that appears after the process started: main spins for argv[2] ms,
 * then dlopen()s argv[1] (this file built with -DLIB -shared -fPIC) and
 * spins in main -> call_lib() -> lib_hot() -> lib_inner() until argv[3] s
 * (default 6) have passed. Built -O2 -fomit-frame-pointer: the library's
 * frames unwind only once emberd has read the process's mappings again,
 * which the BPF unwinder asks for when it meets a pc in no known mapping. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
volatile unsigned long sink;

#ifdef LIB
__attribute__((noinline, noclone)) void lib_inner(volatile sig_atomic_t *halt)
{
	while (!*halt)
		sink++;
}

__attribute__((noinline, noclone)) void lib_hot(volatile sig_atomic_t *halt)
{
	lib_inner(halt);
	sink += 2;
}
#else
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

__attribute__((noinline, noclone)) void spin_ms(long ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 100000; i++)
			sink++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

__attribute__((noinline, noclone)) void call_lib(void (*hot)(volatile sig_atomic_t *))
{
	hot(&stop);
	sink += 3;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: dlopen_late LIB [MS_BEFORE] [SECONDS]\n");
		return 2;
	}
	spin_ms(argc > 2 ? atol(argv[2]) : 1000);
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen_late: %s\n", dlerror());
		return 1;
	}
	void (*hot)(volatile sig_atomic_t *) = (void (*)(volatile sig_atomic_t *))dlsym(lib, "lib_hot");
	if (!hot) {
		fprintf(stderr, "dlopen_late: %s\n", dlerror());
		return 1;
	}
	signal(SIGALRM, on_alarm);
	alarm(argc > 3 ? atoi(argv[3]) : 6);
	call_lib(hot);
	return 0;
}
#endif
