/*
 * A program that says it is a HotSpot JVM: built with -rdynamic, it
 * exports the structure-table symbols a libjvm.so exports, with lies in
 * them, as any local user can. Argument: the lie.
 *   endless  an entry table with no end, its names 64 KiB without a NUL
 *   huge     strides and offsets far past an entry, tables at address 8
 *   garbage  plausible tables whose names and offsets are noise, rewritten
 *            all the time
 * Then it spins in spin_under_lies() for argv[2] seconds (default 30).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENTRIES (1 << 16)
#define STRIDE 48

static char endless[1 << 16];
static uint64_t table[ENTRIES * STRIDE / 8];

void *gHotSpotVMStructs = table;
uint64_t gHotSpotVMStructEntryArrayStride = STRIDE;
uint64_t gHotSpotVMStructEntryTypeNameOffset = 0;
uint64_t gHotSpotVMStructEntryFieldNameOffset = 8;
uint64_t gHotSpotVMStructEntryTypeStringOffset = 16;
uint64_t gHotSpotVMStructEntryIsStaticOffset = 24;
uint64_t gHotSpotVMStructEntryOffsetOffset = 32;
uint64_t gHotSpotVMStructEntryAddressOffset = 40;
void *gHotSpotVMTypes = table;
uint64_t gHotSpotVMTypeEntryArrayStride = STRIDE;
uint64_t gHotSpotVMTypeEntryTypeNameOffset = 0;
uint64_t gHotSpotVMTypeEntrySuperclassNameOffset = 8;
uint64_t gHotSpotVMTypeEntryIsOopTypeOffset = 16;
uint64_t gHotSpotVMTypeEntryIsIntegerTypeOffset = 20;
uint64_t gHotSpotVMTypeEntryIsUnsignedOffset = 24;
uint64_t gHotSpotVMTypeEntrySizeOffset = 32;
void *gHotSpotVMIntConstants = table;
uint64_t gHotSpotVMIntConstantEntryArrayStride = STRIDE;
uint64_t gHotSpotVMIntConstantEntryNameOffset = 0;
uint64_t gHotSpotVMIntConstantEntryValueOffset = 8;
void *gHotSpotVMLongConstants = table;
uint64_t gHotSpotVMLongConstantEntryArrayStride = STRIDE;
uint64_t gHotSpotVMLongConstantEntryNameOffset = 0;
uint64_t gHotSpotVMLongConstantEntryValueOffset = 8;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) uint64_t spin_under_lies(double seconds, int garbage)
{
	double end = now() + seconds;
	uint64_t x = 1;

	while (now() < end) {
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		if (garbage)
			for (size_t i = 0; i < sizeof(table) / 8; i += 7)
				table[i] = x ^ (i * 0x9e3779b97f4a7c15ULL);
	}
	return x;
}

int main(int argc, char **argv)
{
	const char *lie = argc > 1 ? argv[1] : "endless";
	double seconds = argc > 2 ? atof(argv[2]) : 30;
	int garbage = 0;

	memset(endless, 'A', sizeof(endless));
	if (!strcmp(lie, "endless")) {
		for (size_t i = 0; i < ENTRIES; i++)
			for (size_t f = 0; f < STRIDE / 8; f++)
				table[i * STRIDE / 8 + f] = (uint64_t)endless;
	} else if (!strcmp(lie, "huge")) {
		gHotSpotVMStructEntryArrayStride = 1ULL << 40;
		gHotSpotVMTypeEntrySizeOffset = 1ULL << 62;
		gHotSpotVMStructs = (void *)8;
		gHotSpotVMIntConstants = (void *)8;
	} else {
		garbage = 1;
	}
	return (int)(spin_under_lies(seconds, garbage) & 1);
}
