/* Syscalls issued from the calling function itself. Debian's libc has no
 * frame pointers, so a libc wrapper hides its caller from frame-pointer
 * unwinding (the caller's return address is never in the frame chain); an
 * inlined syscall keeps the named function in the stack. x86_64 only. */
#ifndef RAW_SYSCALL_H
#define RAW_SYSCALL_H
#include <sys/syscall.h>

static inline __attribute__((always_inline)) long raw_syscall3(long n, long a, long b, long c)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
}
#endif
