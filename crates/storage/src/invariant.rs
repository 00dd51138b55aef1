//! Invariants that protect data, checked in release builds too.
//!
//! A broken invariant on offsets, epochs or trim points means the engine's picture of a stream
//! no longer matches what is durable. Going on would acknowledge, upload or trim the wrong
//! data; stopping loses nothing, because the WAL and the metadata store recover the durable
//! state on restart. So a violation logs what it saw and aborts the process.

/// Checks `cond`; if it does not hold, logs the message and stops the broker.
#[macro_export]
macro_rules! invariant {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            $crate::invariant::violated(format_args!($($arg)+))
        }
    };
}

#[cold]
#[inline(never)]
pub fn violated(what: std::fmt::Arguments<'_>) -> ! {
    tracing::error!(
        "storage invariant violated: {what}; stopping so that recovery starts from durable state"
    );
    eprintln!("weir: storage invariant violated: {what}");
    std::process::abort()
}
