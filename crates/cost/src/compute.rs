//! Compute: how many brokers a workload needs, from the CPU seconds each system spends per GiB
//! it moves, at a target utilization of an instance type's vCPUs, priced by the hour.

/// An instance type: vCPUs and the on-demand price in us-east-1, $/hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Instance {
    pub name: &'static str,
    pub vcpus: f64,
    pub hourly: f64,
}

/// Instance types `--instance` knows (`--instance-vcpus` and `--instance-hourly` override, or
/// describe one not listed). r6in.large is the seeds' comparison's broker.
pub const INSTANCES: &[Instance] = &[
    Instance {
        name: "r6in.large",
        vcpus: 2.0,
        hourly: 0.17433,
    },
    Instance {
        name: "r6in.xlarge",
        vcpus: 4.0,
        hourly: 0.34866,
    },
    Instance {
        name: "r6i.large",
        vcpus: 2.0,
        hourly: 0.126,
    },
    Instance {
        name: "m6i.large",
        vcpus: 2.0,
        hourly: 0.096,
    },
    Instance {
        name: "m6i.xlarge",
        vcpus: 4.0,
        hourly: 0.192,
    },
    Instance {
        name: "c6i.large",
        vcpus: 2.0,
        hourly: 0.085,
    },
    Instance {
        name: "m7g.large",
        vcpus: 2.0,
        hourly: 0.0816,
    },
];

/// The instance type called `name`.
pub fn instance(name: &str) -> Option<Instance> {
    INSTANCES.iter().copied().find(|i| i.name == name)
}

/// Where the default CPU figures come from: `make bench`'s workload (a), 1 KiB records at
/// 120 MiB/s, acks=all, one consumer group, both brokers single on this repository's
/// benchmark machine (2 vCPUs), broker CPU seconds per GiB produced + consumed.
pub const BENCH_SOURCE: &str = "bench/results/2026-12-06-0607.md, workload (a)";
/// Weir's figure there (file WAL; 1.30 with objects on S3: the larger is taken).
pub const WEIR_CPU_S_PER_GIB: f64 = 1.55;
/// Apache Kafka 4.1's figure there (one replica, so no replication traffic).
pub const KAFKA_CPU_S_PER_GIB: f64 = 2.62;
/// Brokers at least: one in each of three zones (Kafka's replicas; Weir's zone-aware clients
/// each need a broker in their zone).
pub const MIN_BROKERS: u32 = 3;

/// The brokers a system needs, and how that was worked out.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub brokers: u32,
    /// CPU seconds per GiB moved (produced, consumed, and for Kafka replicated).
    pub cpu_s_per_gib: f64,
    /// Where `cpu_s_per_gib` comes from.
    pub cpu_source: String,
    /// GiB per second the brokers move.
    pub gib_per_s: f64,
    /// vCPUs busy on average.
    pub cores: f64,
    /// What set the count: `CPU`, `minimum` (three zones) or `given` (`--brokers`).
    pub bound: &'static str,
    /// Bytes per second through the brokers' network interfaces, in and out together
    /// (clients, replication, object storage): shown, not used for sizing.
    pub nic_bytes_per_s: f64,
}

/// Brokers of `vcpus` each, used at `utilization` at most, for `gib_per_s` moved at
/// `cpu_s_per_gib`; at least `minimum`.
pub fn size(
    cpu_s_per_gib: f64,
    cpu_source: String,
    gib_per_s: f64,
    vcpus: f64,
    utilization: f64,
    minimum: u32,
) -> Sizing {
    let cores = cpu_s_per_gib * gib_per_s;
    let per_broker = (vcpus * utilization).max(1e-9);
    let by_cpu = (cores / per_broker).ceil();
    let (brokers, bound) = if by_cpu > f64::from(minimum) {
        (by_cpu.min(f64::from(u32::MAX)) as u32, "CPU")
    } else {
        (minimum, "minimum")
    };
    Sizing {
        brokers,
        cpu_s_per_gib,
        cpu_source,
        gib_per_s,
        cores,
        bound,
        nic_bytes_per_s: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_follow_the_cpu_above_the_minimum() {
        // 1.5 s/GiB at 2 GiB/s: 3 cores; at half of 2 vCPUs, 3 brokers: the minimum.
        let s = size(1.5, "x".into(), 2.0, 2.0, 0.5, 3);
        assert_eq!((s.brokers, s.bound), (3, "minimum"));
        assert!((s.cores - 3.0).abs() < 1e-9);
        // 2.62 s/GiB at 12 GiB/s: 31.4 cores, 32 brokers.
        let s = size(2.62, "x".into(), 12.0, 2.0, 0.5, 3);
        assert_eq!((s.brokers, s.bound), (32, "CPU"));
    }

    #[test]
    fn instances_are_found_by_name() {
        assert_eq!(instance("r6in.large").map(|i| i.hourly), Some(0.17433));
        assert!(instance("nope.large").is_none());
    }
}
