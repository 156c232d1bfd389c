// A Java program shaped like a service, with known methods, for emberd's
// Java tests (issue 45). Run with no flags: `java Jobs.java SECONDS`.
// Each thread runs distinct methods:
// - "chain": outerJob -> middleStep -> leafWork, hot for seconds (C2
//   inlines the two callees into outerJob);
// - "streams": a lambda in a stream pipeline;
// - "shapes": a virtual call through an interface (three classes);
// - "reader": a JNI call (FileInputStream.readBytes -> read(2) in libc);
// - "sleeper": Thread.sleep under sleepyJob;
// - "holder" and "waiter": a contended lock, the waiter blocked under
//   waitForLock;
// - "deep": a 300-deep recursion ending in deepWork.
import java.io.FileInputStream;
import java.io.IOException;
import java.util.stream.LongStream;

public class Jobs {
    interface Shape {
        long area(long seed);
    }

    static final class Square implements Shape {
        public long area(long s) {
            return (s * s) % 1000003;
        }
    }

    static final class Circle implements Shape {
        public long area(long s) {
            return (s * 314159 / 100000) % 1000003;
        }
    }

    static final class Triangle implements Shape {
        public long area(long s) {
            return (s * (s + 1) / 2) % 1000003;
        }
    }

    static volatile long sink;
    static final Object lock = new Object();

    static long leafWork(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = (x + i * 31) % 1000003;
        }
        return x;
    }

    static long middleStep(long n) {
        return leafWork(n) + 1;
    }

    static long outerJob(long n) {
        return middleStep(n) ^ 7;
    }

    static long streamJob(long n) {
        return LongStream.range(0, n).map(i -> i * 31 % 1000003).filter(v -> (v & 1) == 0).sum();
    }

    static long shapeJob(Shape[] shapes, long n) {
        long t = 0;
        for (long i = 0; i < n; i++) {
            t += shapes[(int) (i % shapes.length)].area(i);
        }
        return t;
    }

    static long readZeroes(FileInputStream in, byte[] buf) throws IOException {
        return in.read(buf);
    }

    static void sleepyJob() throws InterruptedException {
        Thread.sleep(50);
    }

    static long holdLock(long n) {
        synchronized (lock) {
            return leafWork(n);
        }
    }

    static long waitForLock() {
        synchronized (lock) {
            return 1;
        }
    }

    static long deepWork() {
        long end = System.nanoTime() + 1_000_000;
        long x = 0;
        while (System.nanoTime() < end) {
            x += x * 31 + 7;
        }
        return x;
    }

    static long recurse(int depth) {
        if (depth == 0) {
            return deepWork();
        }
        return recurse(depth - 1) + 1;
    }

    interface Body {
        void run() throws Exception;
    }

    static void loop(String name, long until, Body body) {
        Thread t = new Thread(() -> {
            try {
                while (System.nanoTime() < until) {
                    body.run();
                }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, name);
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        long until = System.nanoTime() + (long) (seconds * 1e9);
        Shape[] shapes = {new Square(), new Circle(), new Triangle()};
        FileInputStream zero = new FileInputStream("/dev/zero");
        byte[] buf = new byte[1 << 16];
        loop("streams", until, () -> sink += streamJob(200_000));
        loop("shapes", until, () -> sink += shapeJob(shapes, 200_000));
        loop("reader", until, () -> sink += readZeroes(zero, buf));
        loop("sleeper", until, Jobs::sleepyJob);
        loop("holder", until, () -> sink += holdLock(5_000_000));
        loop("waiter", until, () -> sink += waitForLock());
        loop("deep", until, () -> sink += recurse(300));
        System.out.println("started");
        System.out.flush();
        while (System.nanoTime() < until) {
            sink += outerJob(5_000_000);
        }
    }
}
