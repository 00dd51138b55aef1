package dev.weir.compat;

import java.util.Map;

/**
 * What a test class runs against: one broker ({@link Broker}), or with
 * {@code WEIR_COMPAT_TARGET=cluster} a three-broker Weir cluster ({@link Cluster}).
 */
public interface Target extends AutoCloseable {
    /** Every broker's address, comma-separated. */
    String bootstrap();

    /** Every broker's node id and the host:port it advertises. */
    Map<Integer, String> nodes();

    /** Starts what {@code WEIR_COMPAT_TARGET} asks for ({@code broker}, the default, or {@code cluster}). */
    static Target start(String name) throws Exception {
        return clusterMode() ? Cluster.start(name, Cluster.SIZE) : Broker.start(name);
    }

    static boolean clusterMode() {
        String t = System.getenv().getOrDefault("WEIR_COMPAT_TARGET", "broker").trim().toLowerCase();
        return switch (t) {
            case "", "broker" -> false;
            case "cluster" -> true;
            default -> throw new IllegalArgumentException("WEIR_COMPAT_TARGET must be broker or cluster, not " + t);
        };
    }
}
