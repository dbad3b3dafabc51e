//! Prints what `auto` measured on this machine, for one thread and for
//! every CPU: `cargo run --release -p prezero --example calibrate`.

fn main() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    for t in 1..=n {
        let c = prezero::calibration_for(t);
        println!(
            "auto x{t} = {} (calibrated in {:.1} ms)",
            c.backend,
            c.elapsed.as_secs_f64() * 1e3
        );
        for (b, g) in &c.gib_per_s {
            println!(
                "  {:<10} {g:6.2} GiB/s ({t} thread{})",
                b.name(),
                if t == 1 { "" } else { "s" }
            );
        }
    }
}
