//! No code. Its manifest enables the dependency features that every host
//! release build resolves, so that the separate cargo invocations of
//! harness/src/host_build.rs share their compiled dependencies (see
//! host-features/Cargo.toml).
