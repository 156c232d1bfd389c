/* Spins for argv[1] s (default 10) in code it wrote to anonymous executable
 * memory, as a JIT would, with rbp cleared (JIT code built without frame
 * pointers): a profiler cannot walk past that frame, and must say so. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	/* xor %ebp,%ebp; 1: jmp 1b */
	static const unsigned char code[] = {0x31, 0xed, 0xeb, 0xfe};
	void *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED)
		return 1;
	memcpy(mem, code, sizeof(code));
	alarm(argc > 1 ? atoi(argv[1]) : 10); /* SIGALRM ends it */
	((void (*)(void))mem)();
	return 0;
}
