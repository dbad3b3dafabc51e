//! The PNG chart: per scenario, one bar per phase (p50 of launch→phase)
//! with a line from the fastest to the slowest boot, on a log time axis
//! (a zerostart probe boot and a TCG Linux boot differ by 10-100x).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::phase::Phase;
use crate::report::Report;

/// Fonts tried for the chart's text (plotters' pure-Rust renderer needs a
/// TrueType file; Debian: fonts-dejavu-core).
pub const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Chart errors.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// No usable font.
    #[error("no TrueType font for the chart (looked for {0}); install fonts-dejavu-core")]
    NoFont(String),
    /// Drawing failed.
    #[error("drawing {path}: {msg}")]
    Draw {
        /// Output file.
        path: PathBuf,
        /// plotters' message.
        msg: String,
    },
}

fn register_font() -> Result<(), ChartError> {
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
        Err(FONTS.join(", "))
    })
    .clone()
    .map_err(ChartError::NoFont)
}

const COLORS: [RGBColor; 5] = [
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0xdd, 0x84, 0x52),
    RGBColor(0x81, 0x72, 0xb3),
    RGBColor(0xc4, 0x4e, 0x52),
];

/// Draws `report` to `path` (PNG).
pub fn draw(report: &Report, path: &Path) -> Result<(), ChartError> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| ChartError::Draw {
        path: path.to_path_buf(),
        msg: e.to_string(),
    };
    let phases: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| *p != Phase::Launch)
        .collect();
    let ran: Vec<_> = report
        .scenarios
        .iter()
        .filter(|s| s.skipped.is_none())
        .collect();
    let slots = phases.len() + 1;
    let n = (ran.len() * slots).max(1) as i32;
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for s in &ran {
        for x in s.phases.values().filter(|x| x.max > 0.0) {
            lo = lo.min(x.min);
            hi = hi.max(x.max);
        }
    }
    if lo > hi {
        (lo, hi) = (1.0, 1000.0);
    }
    let lo = (lo / 2.0).max(0.01);
    let hi = hi * 2.0;

    let width = (240 + 150 * ran.len() as u32).clamp(640, 2400);
    let root = BitMapBackend::new(path, (width, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let names: Vec<String> = ran.iter().map(|s| s.name.clone()).collect();
    let mid = phases.len() as i32 / 2;
    let label = move |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(k) if k % slots as i32 == mid => names
            .get((k / slots as i32) as usize)
            .cloned()
            .unwrap_or_default(),
        _ => String::new(),
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "boot phases: bar = p50 of launch→phase, line = min..max",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), (lo..hi).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n as usize)
        .x_label_formatter(&label)
        .y_desc("ms since launch (log)")
        .y_label_formatter(&|y| format!("{y}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (pi, phase) in phases.iter().enumerate() {
        let color = COLORS[pi % COLORS.len()];
        let bars: Vec<_> = ran
            .iter()
            .enumerate()
            .filter_map(|(si, s)| {
                let x = s.phases.get(phase)?;
                let k = (si * slots + pi) as i32;
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(k), lo),
                        (SegmentValue::Exact(k + 1), x.p50.max(lo)),
                    ],
                    color.filled(),
                );
                r.set_margin(0, 0, 2, 2);
                Some(r)
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(phase.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        let whiskers: Vec<_> = ran
            .iter()
            .enumerate()
            .filter_map(|(si, s)| {
                let x = s.phases.get(phase)?;
                let k = (si * slots + pi) as i32;
                Some(PathElement::new(
                    vec![
                        (SegmentValue::CenterOf(k), x.min.max(lo)),
                        (SegmentValue::CenterOf(k), x.max.max(lo)),
                    ],
                    BLACK.stroke_width(2),
                ))
            })
            .collect();
        chart.draw_series(whiskers).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One panel of [`draw_grouped`]: a phase, and per x label (a guest size)
/// one value per series (a configuration), `None` where it is missing.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Panel title (the phase).
    pub title: String,
    /// `values[x][series]`, in seconds.
    pub values: Vec<Vec<Option<f64>>>,
}

/// Draws side-by-side bars (one panel per phase, one group per x label,
/// one bar per series, each labelled with its value) to `path` (PNG): the
/// `make demo` chart, where the same guest is started several ways.
pub fn draw_grouped(
    caption: &str,
    x_labels: &[String],
    series: &[String],
    panels: &[Panel],
    path: &Path,
) -> Result<(), ChartError> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| ChartError::Draw {
        path: path.to_path_buf(),
        msg: e.to_string(),
    };
    let width = (360 * panels.len() as u32).clamp(640, 2400);
    let root = BitMapBackend::new(path, (width, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(caption, ("sans-serif", 20))
        .map_err(|e| err(&e))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    let slots = series.len() + 1;
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let n = (x_labels.len() * slots).max(1) as i32;
        let hi = panel
            .values
            .iter()
            .flatten()
            .flatten()
            .fold(0.0f64, |a, &b| a.max(b))
            .max(0.001)
            * 1.2;
        let labels = x_labels.to_vec();
        let mid = series.len() as i32 / 2;
        let label = move |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(k) if k % slots as i32 == mid => labels
                .get((k / slots as i32) as usize)
                .cloned()
                .unwrap_or_default(),
            _ => String::new(),
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..hi)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n as usize)
            .x_label_formatter(&label)
            .y_desc("s from launch")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        for (si, name) in series.iter().enumerate() {
            let color = COLORS[si % COLORS.len()];
            let bars: Vec<_> = panel
                .values
                .iter()
                .enumerate()
                .filter_map(|(xi, v)| {
                    let y = (*v.get(si)?)?;
                    let k = (xi * slots + si) as i32;
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(k), 0.0),
                            (SegmentValue::Exact(k + 1), y),
                        ],
                        color.filled(),
                    );
                    r.set_margin(0, 0, 1, 1);
                    Some(r)
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
            let texts: Vec<_> = panel
                .values
                .iter()
                .enumerate()
                .filter_map(|(xi, v)| {
                    let y = (*v.get(si)?)?;
                    let k = (xi * slots + si) as i32;
                    Some(Text::new(
                        format!("{y:.1}"),
                        (SegmentValue::CenterOf(k), y),
                        ("sans-serif", 11),
                    ))
                })
                .collect();
            chart.draw_series(texts).map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
