/* main -> level_a() -> level_b() -> level_c(), each with a scratch buffer
 * of its own odd size on the stack (a parser's token buffer, a formatter's
 * line), level_c spinning until argv[1] s (default 10) have passed. Built
 * without frame pointers, its CFI names frame sizes (rsp+4136, ...) that few
 * other files name: its table adds rules of its own to the unwinder's
 * shared rule table. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static volatile unsigned long sink;

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

/* noclone: keep the names; the work after each call keeps it a call. */
__attribute__((noinline, noclone)) void level_c(void)
{
	char line[4120];
	memset(line, (int)sink, sizeof(line));
	while (!stop)
		sink += (unsigned char)line[sink % sizeof(line)];
}

__attribute__((noinline, noclone)) void level_b(void)
{
	char token[6184];
	memset(token, 1, sizeof(token));
	level_c();
	sink += (unsigned char)token[sink % sizeof(token)];
}

__attribute__((noinline, noclone)) void level_a(void)
{
	char page[8248];
	memset(page, 2, sizeof(page));
	level_b();
	sink += (unsigned char)page[sink % sizeof(page)];
}

int main(int argc, char **argv)
{
	signal(SIGALRM, on_alarm);
	alarm(argc > 1 ? atoi(argv[1]) : 10);
	level_a();
	return 0;
}
