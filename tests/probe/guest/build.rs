//! Links the probe as a freestanding static image at the address its
//! linker script gives (the bzImage protected-mode load address): no C
//! runtime, no libc, no PIE.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=link.ld");
    for arg in [
        "-nostartfiles",
        "-nostdlib",
        "-static",
        "-no-pie",
        "-Wl,--build-id=none",
        "-Wl,--no-dynamic-linker",
        "-Wl,-z,noexecstack",
        "-Wl,--gc-sections",
    ] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{dir}/link.ld");
}
