/* main -> level_a() -> level_b() -> level_c(), level_c spinning (calling
 * nothing) until argv[1] s (default 10) have passed. Built -O2
 * -fomit-frame-pointer: only the .eh_frame unwinder can name the chain. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static volatile unsigned long sink;

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

/* noclone: keep the names (no level_c.constprop.0); the work after each
 * call keeps it a call (no tail call). */
__attribute__((noinline, noclone)) void level_c(void)
{
	while (!stop)
		sink++;
}

__attribute__((noinline, noclone)) void level_b(void)
{
	level_c();
	sink += 2;
}

__attribute__((noinline, noclone)) void level_a(void)
{
	level_b();
	sink += 3;
}

int main(int argc, char **argv)
{
	signal(SIGALRM, on_alarm);
	alarm(argc > 1 ? atoi(argv[1]) : 10);
	level_a();
	return 0;
}
