//! The benches' producer wait: spin briefly, then give the CPU away. One
//! source for `consumer/benches/ring.rs` and `daemon/benches/daemon.rs`
//! (the daemon's bench includes this file with `#[path]`).

/// Spins 64 times, then yields, until `ready()` holds. Yielding matters on
/// a shared machine: the consumer may need this core to make room.
pub fn spin_then_yield(mut ready: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
