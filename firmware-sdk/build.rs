//! Builds the C producer exactly as firmware does (freestanding C11, every
//! warning an error) for the host tests. HMB_FWSDK_SANITIZE=1 builds it with
//! AddressSanitizer and UndefinedBehaviorSanitizer and links their runtimes
//! into the test binaries (see docs/firmware-sdk.md).

use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let uapi = root.join("../kmod/include/uapi");
    let sanitize = std::env::var("HMB_FWSDK_SANITIZE").is_ok_and(|v| v == "1");
    for f in [
        "src/hmb_trace_fw.c",
        "include/hmb_trace_fw.h",
        "compat/linux/types.h",
        "compat/linux/ioctl.h",
        "support/shim.c",
        "../kmod/include/uapi/linux/nvme_hmb_trace.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed=HMB_FWSDK_SANITIZE");

    let mut build = cc::Build::new();
    build
        .file(root.join("src/hmb_trace_fw.c"))
        .file(root.join("support/shim.c"))
        // compat/ first: it stands in for <linux/types.h> as on a target.
        .include(root.join("compat"))
        .include(&uapi)
        .include(root.join("include"))
        .std("c11")
        .flag("-ffreestanding")
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Werror")
        .flag("-pedantic")
        .warnings(true);
    if sanitize {
        for f in [
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ] {
            build.flag(f);
        }
        // rustc links with -nodefaultlibs, so the gcc driver adds no
        // sanitizer runtime: name them. ASan's runtime is then not first in
        // the library order; run with ASAN_OPTIONS=verify_asan_link_order=0.
        println!("cargo:rustc-link-lib=dylib=asan");
        println!("cargo:rustc-link-lib=dylib=ubsan");
        println!("cargo:rustc-cfg=fwsdk_sanitize");
    }
    println!("cargo::rustc-check-cfg=cfg(fwsdk_sanitize)");
    build.compile("hmb_trace_fw");
}
