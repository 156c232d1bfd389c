/* Spins in a function whose symbol name is LONG_NAME, from a header the
 * test writes: any user can build a binary with a 4 MiB symbol name. */
#include <stdio.h>
#include "long_name.h"

unsigned long holdout_spin(unsigned long n) __asm__(LONG_NAME);

__attribute__((noinline)) unsigned long holdout_spin(unsigned long n)
{
	volatile unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++)
		x += i * 7;
	return x;
}

int main(void)
{
	unsigned long sum = 0;
	for (;;) {
		sum += holdout_spin(50000000UL);
		if (sum == 42)
			printf("%lu\n", sum);
	}
}
