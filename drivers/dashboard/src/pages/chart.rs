//! Sparklines: a small inline SVG of recent values, drawn by the server (no chart library,
//! no script), scaled to the largest value shown.

use std::fmt::Write;

use maud::{html, Markup};

const WIDTH: f64 = 120.0;
const HEIGHT: f64 = 24.0;

/// A sparkline of `values` (oldest first) with `label` as its tooltip, and the latest value
/// written beside it.
pub(crate) fn sparkline(label: &str, values: &[f64], unit: &str) -> Markup {
    let max = values.iter().copied().fold(0.0_f64, f64::max);
    let latest = values.last().copied().unwrap_or(0.0);
    let points = points(values, max);
    html! {
        span.spark {
            svg width=(WIDTH) height=(HEIGHT) viewBox={"0 0 " (WIDTH) " " (HEIGHT)}
                role="img" aria-label=(label) data-samples=(values.len()) {
                title { (label) ", peak " (figure(max)) (unit) }
                @if values.len() > 1 {
                    polyline points=(points) {}
                }
            }
            span.latest { (figure(latest)) (unit) }
        }
    }
}

/// The polyline's points: `values` spread over the width, 0 at the bottom, `max` at the top.
fn points(values: &[f64], max: f64) -> String {
    let step = WIDTH / (values.len().max(2) - 1) as f64;
    let scale = if max > 0.0 { (HEIGHT - 2.0) / max } else { 0.0 };
    let mut out = String::new();
    for (i, value) in values.iter().enumerate() {
        let y = HEIGHT - 1.0 - value * scale;
        let _ = write!(out, "{:.1},{:.1} ", i as f64 * step, y);
    }
    out.trim_end().to_owned()
}

/// A figure for a chart's label: whole when it is whole or above 10, one decimal otherwise.
fn figure(value: f64) -> String {
    if value >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_span_the_box() {
        assert_eq!(
            points(&[0.0, 5.0, 10.0], 10.0),
            "0.0,23.0 60.0,12.0 120.0,1.0"
        );
        assert_eq!(
            points(&[0.0, 0.0], 0.0),
            "0.0,23.0 120.0,23.0",
            "flat at zero"
        );
    }

    #[test]
    fn a_single_sample_draws_no_line() {
        let svg = sparkline("depth", &[3.0], "").into_string();
        assert!(!svg.contains("polyline"), "{svg}");
        assert!(svg.contains(">3<"), "{svg}");
    }
}
