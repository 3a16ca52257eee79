//! PNG plots (plotters, bitmap backend; text drawn with a TrueType font loaded at run time so no
//! system graphics library is needed): TTFT CDF per point, hit rate per point against the three
//! ceilings, and achieved throughput and p90 TTFT against offered load. A point with several
//! seeds is drawn at its medians (the CDF quantile by quantile); the hit-rate bars carry the
//! interval as a whisker.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use super::points::{Point, Section};
use super::tables::{hit_rates, HitRates};
use super::{Loaded, ReportError};
use crate::stats::median;

const FONT: &str = "sans-serif";

/// Loads the font the plots write their text with.
pub(crate) fn register_font(path: &Path) -> Result<(), ReportError> {
    let bytes = std::fs::read(path).map_err(|e| ReportError::Font {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    // The plotters font registry wants 'static data; one font per process, loaded once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FONT, FontStyle::Normal, bytes).map_err(|_| ReportError::Font {
        path: path.to_owned(),
        reason: "not a TrueType/OpenType font".into(),
    })
}

fn plot_err(path: &Path) -> impl Fn(String) -> ReportError + '_ {
    move |reason| ReportError::Plot {
        path: path.to_owned(),
        reason,
    }
}

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// Draws the plots of one section; returns (title, file name) of each.
pub(crate) fn workload_plots(
    dir: &Path,
    section: &Section<'_>,
) -> Result<Vec<(String, String)>, ReportError> {
    let mut out = Vec::new();
    let stem = section.stem();
    let (suite, workload) = (&section.suite, section.workload);
    let what = match &section.tag {
        Some(tag) => format!("{workload}, {tag}"),
        None => workload.to_owned(),
    };
    let closed = section.closed();
    let open = section.open();
    if closed
        .iter()
        .any(|p| p.runs.iter().any(|r| !r.result.ttft_cdf_ms.is_empty()))
    {
        let file = format!("{stem}-ttft-cdf.png");
        let title = format!("TTFT CDF, {what} ({suite}, closed loop)");
        ttft_cdf(&dir.join(&file), &title, &closed).map_err(plot_err(&dir.join(&file)))?;
        out.push((title, file));
    }
    if closed
        .iter()
        .any(|p| p.estimate(|r| hit_rates(r).measured).is_some())
    {
        let file = format!("{stem}-hit-rate.png");
        let title = format!("Fleet hit rate vs oracles, {what} ({suite})");
        hit_rate_plot(&dir.join(&file), &title, &closed).map_err(plot_err(&dir.join(&file)))?;
        out.push((title, file));
    }
    if !open.is_empty() {
        let file = format!("{stem}-throughput.png");
        let title = format!("Throughput and TTFT p90 vs offered load, {what} ({suite})");
        throughput(&dir.join(&file), &title, &open).map_err(plot_err(&dir.join(&file)))?;
        out.push((title, file));
    }
    Ok(out)
}

/// The point's TTFT CDF: each quantile the median of the seeds' (a CDF of typical runs, not of
/// the pooled requests, so that one seed's long tail does not pass for every seed's).
fn median_cdf(p: &Point<'_>) -> Vec<f64> {
    let len = p
        .runs
        .iter()
        .map(|r| r.result.ttft_cdf_ms.len())
        .max()
        .unwrap_or(0);
    (0..len)
        .filter_map(|k| {
            let at: Vec<f64> = p
                .runs
                .iter()
                .filter_map(|r| r.result.ttft_cdf_ms.get(k).copied())
                .collect();
            median(&at)
        })
        .collect()
}

/// The median of a figure over the point's seeds.
fn med(p: &Point<'_>, figure: impl Fn(&Loaded) -> Option<f64>) -> Option<f64> {
    p.estimate(figure).map(|e| e.median)
}

fn ttft_cdf(path: &Path, title: &str, points: &[&Point<'_>]) -> Result<(), String> {
    let cdfs: Vec<Vec<f64>> = points.iter().map(|p| median_cdf(p)).collect();
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    // Cut the x axis at the largest p99 so that one slow tail does not flatten every curve.
    let xmax = cdfs
        .iter()
        .filter_map(|c| c.get(99).copied())
        .fold(1.0, f64::max)
        * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..xmax, 0f64..1f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("TTFT (ms)")
        .y_desc("fraction of requests")
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (p, cdf)) in points.iter().zip(&cdfs).enumerate() {
        let n = cdf.len().max(2) - 1;
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                cdf.iter()
                    .enumerate()
                    .map(|(k, v)| (v.min(xmax), k as f64 / n as f64)),
                c.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(p.label().to_owned())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

fn hit_rate_plot(path: &Path, title: &str, points: &[&Point<'_>]) -> Result<(), String> {
    let root = BitMapBackend::new(path, (900, 530)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let labels: Vec<String> = points.iter().map(|p| p.label().to_owned()).collect();
    let n = points.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(80)
        .y_label_area_size(50)
        .build_cartesian_2d((0..n).into_segmented(), 0f64..1f64)
        .map_err(|e| e.to_string())?;
    let fmt = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => labels
            .get(*i)
            .map(|l| l.replace("warmpath-", "wp-"))
            .unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&fmt)
        .x_label_style((FONT, 12))
        .y_desc("fleet prefix-cache hit rate")
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| e.to_string())?;
    // Each ceiling is a horizontal mark across the run's bar: black Belady (the oracle), grey
    // infinite cache above it, red LRU with perfect placement (at or below Belady).
    type Ceiling = fn(&HitRates) -> Option<f64>;
    let ceilings: [(Ceiling, RGBColor, u32); 3] = [
        (|h| h.infinite, RGBColor(150, 150, 150), 2),
        (|h| h.belady, BLACK, 3),
        (|h| h.lru, RGBColor(200, 30, 30), 2),
    ];
    for (i, p) in points.iter().enumerate() {
        let h = HitRates {
            measured: med(p, |r| hit_rates(r).measured),
            belady: med(p, |r| hit_rates(r).belady),
            lru: med(p, |r| hit_rates(r).lru),
            infinite: med(p, |r| hit_rates(r).infinite),
        };
        let c = color(i);
        if let Some((lo, hi)) = p
            .estimate(|r| hit_rates(r).measured)
            .and_then(|e| e.interval)
        {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![
                        (SegmentValue::CenterOf(i), lo),
                        (SegmentValue::CenterOf(i), hi),
                    ],
                    BLACK.stroke_width(1),
                )))
                .map_err(|e| e.to_string())?;
        }
        if let Some(m) = h.measured {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), m),
                    ],
                    c.mix(0.8).filled(),
                )))
                .map_err(|e| e.to_string())?;
        }
        for (get, col, width) in ceilings {
            if let Some(v) = get(&h) {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(SegmentValue::Exact(i), v), (SegmentValue::Exact(i + 1), v)],
                        col.stroke_width(width),
                    )))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    // The key goes under the axis labels, where it cannot hide a bar.
    for (k, line) in [
        "bars: measured hit rate (median over seeds; whisker: its 95 % interval)",
        "marks: black = Belady oracle, grey = infinite cache, red = LRU with perfect placement",
    ]
    .iter()
    .enumerate()
    {
        root.draw(&Text::new(
            *line,
            (60, 478 + 18 * k as i32),
            (FONT, 13).into_font(),
        ))
        .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

fn throughput(path: &Path, title: &str, points: &[&Point<'_>]) -> Result<(), String> {
    let root = BitMapBackend::new(path, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root.titled(title, (FONT, 20)).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(550);
    let mut labels: Vec<String> = points.iter().map(|p| p.label().to_owned()).collect();
    labels.dedup();
    let achieved = |r: &Loaded| Some(r.result.throughput.requests_per_s);
    let p90 = |r: &Loaded| r.result.latency_ms.ttft.p90;
    let xmax = points.iter().filter_map(|p| p.rate()).fold(1.0, f64::max) * 1.05;
    let ymax = points
        .iter()
        .filter_map(|p| med(p, achieved))
        .fold(1.0, f64::max)
        * 1.1;
    let tmax = points
        .iter()
        .filter_map(|p| med(p, p90))
        .fold(1.0, f64::max)
        * 1.1;
    type Getter = fn(&Loaded) -> Option<f64>;
    let panels: [(&DrawingArea<BitMapBackend, _>, &str, f64, Getter); 2] = [
        (&left, "achieved req/s", ymax, |r| {
            Some(r.result.throughput.requests_per_s)
        }),
        (&right, "TTFT p90 (ms, log)", tmax, |r| {
            r.result.latency_ms.ttft.p90
        }),
    ];
    for (k, (area, ydesc, top, get)) in panels.into_iter().enumerate() {
        let mut builder = ChartBuilder::on(area);
        builder
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60);
        // Achieved throughput on a linear axis; TTFT spans decades under overload, so log.
        if k == 0 {
            let mut chart = builder
                .build_cartesian_2d(0f64..xmax, 0f64..top)
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_desc("offered req/s")
                .y_desc(ydesc)
                .label_style((FONT, 13))
                .draw()
                .map_err(|e| e.to_string())?;
            for (i, l) in labels.iter().enumerate() {
                let c = color(i);
                let pts: Vec<(f64, f64)> = points
                    .iter()
                    .filter(|p| p.label() == l)
                    .filter_map(|p| Some((p.rate()?, med(p, get)?)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(l.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| e.to_string())?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font((FONT, 12))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
        } else {
            let bottom = points
                .iter()
                .filter_map(|p| med(p, p90))
                .fold(f64::INFINITY, f64::min)
                .clamp(0.01, top)
                * 0.8;
            let mut chart = builder
                .build_cartesian_2d(0f64..xmax, (bottom..top).log_scale())
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_desc("offered req/s")
                .y_desc(ydesc)
                .label_style((FONT, 13))
                .draw()
                .map_err(|e| e.to_string())?;
            for (i, l) in labels.iter().enumerate() {
                let c = color(i);
                let pts: Vec<(f64, f64)> = points
                    .iter()
                    .filter(|p| p.label() == l)
                    .filter_map(|p| Some((p.rate()?, med(p, get)?)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
                chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    root.present().map_err(|e| e.to_string())
}
