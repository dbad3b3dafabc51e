//! Prints what `auto` measured on this machine:
//! `cargo run --release -p prezero --example calibrate`.

fn main() {
    let c = prezero::calibration();
    println!(
        "auto = {} (calibrated in {:.1} ms)",
        c.backend,
        c.elapsed.as_secs_f64() * 1e3
    );
    for (b, g) in &c.gib_per_s {
        println!("  {:<10} {g:6.2} GiB/s (1 thread)", b.name());
    }
}
