/*
 * A program that says it is node: built with -rdynamic, it exports the
 * V8 postmortem constants node 20 exports (as any local user can), and
 * runs "JavaScript" whose heap lies (issue 46):
 *  - one thread spins in anonymous executable memory (where V8's JIT code
 *    would be) under a frame that looks like a JavaScript frame: its
 *    function's info is named by a cons string whose halves are itself,
 *    claiming 2^31 characters, and its script by a sequential string
 *    claiming as many;
 *  - a second thread spins the same way under another function whose
 *    info's fields are rewritten all the time (names and scripts that move
 *    under the reader, pointers to nowhere);
 *  - a third under `liarLine`, whose ScopeInfo places it at offset 5 of a
 *    script whose source is rewritten all the time: an honest short
 *    string, the self-made cons string, a string claiming 2^31
 *    characters, with line ends V8 never made (a FixedArray claiming 2^24
 *    garbage elements) or none.
 * Argument: seconds to run (default 30).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Node 20.20.2's values (read from its .dynsym). */
int v8dbg_off_fp_function = -16;
int v8dbg_off_fp_context = -8;
int v8dbg_off_fp_context_or_frame_type = -8;
int v8dbg_off_fp_bytecode_array = -32;
int v8dbg_off_fp_bytecode_offset = -40;
int v8dbg_SmiShiftSize = 31;
int v8dbg_SmiTagMask = 1;
int v8dbg_HeapObjectTag = 1;
int v8dbg_HeapObjectTagMask = 3;
int v8dbg_class_HeapObject__map__Map = 0;
int v8dbg_class_Map__instance_type__uint16_t = 12;
int v8dbg_class_JSFunction__shared__SharedFunctionInfo = 24;
int v8dbg_class_SharedFunctionInfo__name_or_scope_info__Object = 16;
int v8dbg_class_SharedFunctionInfo__script_or_debug_info__HeapObject = 32;
int v8dbg_class_Script__name__Object = 16;
int v8dbg_type_JSFunction__JS_FUNCTION_TYPE = 2066;
int v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE = 262;
int v8dbg_type_Script__SCRIPT_TYPE = 167;
int v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE = 261;
int v8dbg_FirstNonstringType = 128;
int v8dbg_class_String__length__int32_t = 12;
int v8dbg_class_SeqOneByteString__chars__char = 16;
int v8dbg_class_SeqTwoByteString__chars__char = 16;
int v8dbg_class_ConsString__first__String = 16;
int v8dbg_class_ConsString__second__String = 24;
int v8dbg_class_ThinString__actual__String = 16;
int v8dbg_StringRepresentationMask = 7;
int v8dbg_StringEncodingMask = 8;
int v8dbg_OneByteStringTag = 8;
int v8dbg_ConsStringTag = 1;
int v8dbg_ThinStringTag = 5;
int v8dbg_scopeinfo_idx_ncontextlocals = 2;
int v8dbg_scopeinfo_idx_first_vars = 3;
int v8dbg_class_Script__source__Object = 8;
int v8dbg_class_Script__line_ends__Object = 56;
int v8dbg_type_FixedArray__FIXED_ARRAY_TYPE = 175;
int v8dbg_class_FixedArrayBase__length__SMI = 8;
int v8dbg_type_Oddball__ODDBALL_TYPE = 131;
int v8dbg_class_SlicedString__parent__String = 16;
int v8dbg_class_SlicedString__offset__SMI = 24;
int v8dbg_SlicedStringTag = 3;
int v8dbg_ExternalStringTag = 2;
int v8dbg_class_ExternalString__resource__Object = 16;

/* Objects of 64 bytes each, tagged (+1) where pointed at. */
enum { MAP_FN, MAP_SFI, MAP_CONS, MAP_SCRIPT, MAP_SEQ, MAP_SCOPE, MAP_ARRAY, FN1, SFI1, CONS, SCRIPT,
       SEQ, FN2, SFI2, FN3, SFI3, SCOPE, NAME3, SCRIPT3, SOURCE3, ARRAY, NOBJ };
static uint64_t heap[NOBJ][8] __attribute__((aligned(64)));
static double until;

static uint64_t tagged(int o)
{
	return (uint64_t)(uintptr_t)heap[o] + 1;
}

static void map_type(int o, uint16_t type)
{
	memcpy((char *)heap[o] + 12, &type, 2);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* `jmp .`: where the sampled threads spin. */
static void *code;

/* Spins in `code` under a frame whose function is `fn` (tagged), built
 * in `frame` (the caller's: a leaf function's locals may sit below its
 * stack pointer, in the red zone, where no frame is). */
static __attribute__((noinline)) void spin_as(uint64_t fn, uint64_t *frame)
{
	uint64_t *fp = &frame[5];

	fp[-5] = 0x1234567800000000ULL; /* a bytecode offset (SMI) */
	fp[-2] = fn;
	fp[-1] = tagged(MAP_FN); /* a context: a heap pointer, not a marker */
	fp[0] = 0;
	fp[1] = 0;
	__asm__ volatile("mov %0, %%rbp\n\tjmp *%1" : : "r"(fp), "r"(code) : "memory");
	__builtin_unreachable();
}

static void *lying_strings(void *arg)
{
	uint64_t frame[8] = { 0 };

	(void)arg;
	spin_as(tagged(FN1), frame);
	return 0;
}

static void *moving_heap(void *arg)
{
	uint64_t frame[8] = { 0 };

	(void)arg;
	spin_as(tagged(FN2), frame);
	return 0;
}

static void *moving_source(void *arg)
{
	uint64_t frame[8] = { 0 };

	(void)arg;
	spin_as(tagged(FN3), frame);
	return 0;
}

static uint64_t smi(int64_t v)
{
	return (uint64_t)v << 32;
}

static void string(int o, const char *text)
{
	int32_t n = strlen(text);

	heap[o][0] = tagged(MAP_SEQ);
	memcpy((char *)heap[o] + 12, &n, 4);
	memcpy((char *)heap[o] + 16, text, n);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 30;
	pthread_t a, b, c;
	uint64_t r = 88172645463325252ULL;
	int32_t huge = 0x7fffffff;

	code = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	((unsigned char *)code)[0] = 0xeb; /* jmp . */
	((unsigned char *)code)[1] = 0xfe;
	map_type(MAP_FN, 2066);
	map_type(MAP_SFI, 262);
	map_type(MAP_CONS, 41); /* a one-byte cons string */
	map_type(MAP_SCRIPT, 167);
	map_type(MAP_SEQ, 40); /* a one-byte sequential string */
	heap[FN1][0] = tagged(MAP_FN);
	heap[FN1][3] = tagged(SFI1);
	heap[SFI1][0] = tagged(MAP_SFI);
	heap[SFI1][2] = tagged(CONS);
	heap[SFI1][4] = tagged(SCRIPT);
	heap[CONS][0] = tagged(MAP_CONS);
	memcpy((char *)heap[CONS] + 12, &huge, 4);
	heap[CONS][2] = tagged(CONS);
	heap[CONS][3] = tagged(CONS);
	heap[SCRIPT][0] = tagged(MAP_SCRIPT);
	heap[SCRIPT][2] = tagged(SEQ);
	heap[SEQ][0] = tagged(MAP_SEQ);
	memcpy((char *)heap[SEQ] + 12, &huge, 4);
	memset((char *)heap[SEQ] + 16, ';', 48);
	heap[FN2][0] = tagged(MAP_FN);
	heap[FN2][3] = tagged(SFI2);
	heap[SFI2][0] = tagged(MAP_SFI);
	map_type(MAP_SCOPE, 261);
	map_type(MAP_ARRAY, 175);
	heap[FN3][0] = tagged(MAP_FN);
	heap[FN3][3] = tagged(SFI3);
	heap[SFI3][0] = tagged(MAP_SFI);
	heap[SFI3][2] = tagged(SCOPE);
	heap[SFI3][4] = tagged(SCRIPT3);
	/* No context locals; the name, then the position (5, 40), then an
	 * object that is no string. */
	heap[SCOPE][0] = tagged(MAP_SCOPE);
	heap[SCOPE][3] = smi(0);
	heap[SCOPE][4] = tagged(NAME3);
	heap[SCOPE][5] = smi(5);
	heap[SCOPE][6] = smi(40);
	heap[SCOPE][7] = tagged(FN1);
	string(NAME3, "liarLine");
	string(SOURCE3, "a\nb\nc\nd\ne\nf\n");
	heap[SCRIPT3][0] = tagged(MAP_SCRIPT);
	heap[SCRIPT3][2] = tagged(NAME3);
	heap[ARRAY][0] = tagged(MAP_ARRAY);
	heap[ARRAY][1] = smi(1 << 24);
	until = now() + seconds;
	pthread_create(&a, 0, lying_strings, 0);
	pthread_create(&b, 0, moving_heap, 0);
	pthread_create(&c, 0, moving_source, 0);
	while (now() < until) {
		/* The second function's info, rewritten all the time: its
		 * name and script among the strings and noise. */
		for (int i = 0; i < 1000; i++) {
			r ^= r << 13;
			r ^= r >> 7;
			r ^= r << 17;
			heap[SFI2][2] = (r & 1) ? tagged(CONS) : (r | 1);
			heap[SFI2][4] = (r & 2) ? tagged(SCRIPT) : (r >> 3) | 1;
			heap[SFI2][0] = (r & 4) ? tagged(MAP_SFI) : tagged(MAP_FN);
			heap[SCRIPT3][1] = (r & 8) ? tagged(SOURCE3) : (r & 16) ? tagged(CONS) : tagged(SEQ);
			heap[SCRIPT3][7] = (r & 32) ? tagged(ARRAY) : 0;
		}
		usleep(100);
	}
	_exit(0);
}
