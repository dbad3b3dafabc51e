//! `engine.png` of `bench host`: GiB/s against threads, one line per
//! method (plotters, as the slo crate's charts).

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::Report;

/// Where a TrueType font is looked for (plotters draws text with one;
/// Debian: fonts-dejavu-core).
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        for f in FONTS {
            if let Ok(bytes) = std::fs::read(f) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font (looked for {}); install fonts-dejavu-core",
            FONTS.join(", ")
        ))
    })
    .clone()
}

/// Draws every method of `r` at `threads` to `path`.
pub(crate) fn engine(
    r: &Report,
    threads: &[usize],
    title: &str,
    path: &Path,
) -> Result<(), String> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut methods: Vec<&str> = Vec::new();
    for m in &r.results {
        if !methods.contains(&m.method.as_str()) {
            methods.push(&m.method);
        }
    }
    let hi = r.results.iter().map(|m| m.gib_per_s).fold(1.0, f64::max) * 1.1;
    let tmax = threads.iter().copied().max().unwrap_or(1) as f64;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "zeroing {} on {title}: GiB/s by threads",
                crate::human(r.size_bytes)
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(0)
        .build_cartesian_2d(0.5..tmax + 0.5, 0.0..hi)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("threads")
        .y_desc("GiB/s")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, method) in methods.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = threads
            .iter()
            .filter_map(|&t| r.get(method, t).map(|m| (t as f64, m.gib_per_s)))
            .collect();
        let width = if *method == "auto" { 4 } else { 2 };
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))
            .map_err(|e| err(&e))?
            .label(method.to_string())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(3))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
