// A busy Java method for args[0] seconds; run with -XX:+PreserveFramePointer
// and write the perf map with `jcmd PID Compiler.perfmap`.
public class Busy {
    static long emberdBusyJavaWork(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = (x + i * 31) % 1000003;
        }
        return x;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        long sink = 0;
        while (System.nanoTime() < end) {
            sink += emberdBusyJavaWork(5_000_000);
        }
        System.out.println(sink > 0 ? "done" : "done.");
    }
}
