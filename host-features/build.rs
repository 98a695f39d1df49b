//! Empty: cargo resolves `[build-dependencies]` (syn's feature, Cargo.toml)
//! only for a package that has a build script.
fn main() {}
