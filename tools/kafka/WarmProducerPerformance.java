// Kafka's own ProducerPerformance (kafka-clients 4.1), run twice in one JVM: a warm-up run,
// then the measured run, so that the measured percentiles are not the JVM's start (class
// loading, the JIT compiling the client's send path while records queue behind it).
// ProducerPerformance in 4.1 has no --warmup-records (KIP-1052 came later), and on a 2-core
// machine its first seconds at 30,000 records/s showed about a second of latency against
// any broker, while the brokers' own append latency stayed in milliseconds.
//
//   kafka.sh tool tools/kafka/WarmProducerPerformance.java WARMUP_RECORDS ARGS...
//
// ARGS are ProducerPerformance's; the warm-up run uses them with --num-records
// WARMUP_RECORDS, the measured run as given. The line "warm-up done" separates the two
// runs' output; the last summary line is the measured run's.
import java.util.Arrays;

import org.apache.kafka.tools.ProducerPerformance;

public class WarmProducerPerformance {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: WarmProducerPerformance WARMUP_RECORDS PRODUCER_PERFORMANCE_ARGS...");
            System.exit(2);
        }
        String warmup = args[0];
        String[] measured = Arrays.copyOfRange(args, 1, args.length);
        String[] warm = measured.clone();
        boolean replaced = false;
        for (int i = 0; i + 1 < warm.length; i++) {
            if (warm[i].equals("--num-records")) {
                warm[i + 1] = warmup;
                replaced = true;
            }
        }
        if (!replaced) {
            System.err.println("WarmProducerPerformance: --num-records is required");
            System.exit(2);
        }
        ProducerPerformance.main(warm);
        System.out.println("warm-up done");
        System.out.flush();
        ProducerPerformance.main(measured);
    }
}
