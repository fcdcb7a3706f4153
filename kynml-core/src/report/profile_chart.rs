//! A profiled run drawn as `profile.svg` and `profile.png`.
//!
//! Under a title that gives the verdict, a legend of the phases (each with its
//! share of the run) and two panels:
//!
//! 1. **The mean step**: one horizontal bar per epoch and one for the whole
//!    run, split into the phases in step order (waiting for the batch, the
//!    copy to the device, forward, backward, optimizer, the rest), in
//!    milliseconds per step, with each part's share written inside it where
//!    it fits. More than [`MAX_ROWS`] epochs are grouped into that many rows.
//! 2. **Every step**: the same phases stacked for each profiled step in run
//!    order, so that a slow first step (autotune, kernel compilation) or a
//!    loader stall stands out (evaluations and checkpoint hand-offs, between
//!    the steps, are summed in the subtitle). Steps over twice the 95th
//!    percentile are cut at that height and named in the caption, so that one
//!    autotuned first step does not flatten the rest. Runs of more than
//!    [`MAX_POINTS`] steps are drawn as the means of consecutive groups.
//!
//! What is drawn is computed once ([`Chart`]) and drawn into SVG and PNG with
//! the look, font and PNG encoder of the training curves.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::curves::{
    guarded, png_of, svg_of, write_file, Drawing, PlotError, Style, AXIS, CAPTION_H, CAPTION_SIZE, DESC_SIZE, GRID,
    LEGEND_SIZE, MARGIN, MUTED, SUBTITLE_SIZE, TEXT, TICK_SIZE, TITLE_SIZE, WIDTH,
};
use crate::train::profile::{Profile, PHASES};

/// At most this many bars in the first panel, the whole run's included.
pub const MAX_ROWS: usize = 12;
/// At most this many points per phase in the second panel.
pub const MAX_POINTS: usize = 1000;

/// What to draw: a profiled run, its title and the verdict in words.
#[derive(Debug, Clone, Copy)]
pub struct ProfileFigure<'a> {
    /// E.g. `"DeepNet on LargeData (cpu)"`.
    pub title: &'a str,
    /// The run's profile.
    pub profile: &'a Profile,
    /// The verdict's advice, printed under the title.
    pub verdict: &'a str,
}

/// Writes `profile.svg` and `profile.png` into `dir`.
pub fn draw(figure: &ProfileFigure, dir: &Path) -> Result<(), PlotError> {
    write_file(&dir.join("profile.svg"), render_svg(figure)?.as_bytes())?;
    write_file(&dir.join("profile.png"), &render_png(figure)?)
}

/// The SVG document of the profile.
pub fn render_svg(figure: &ProfileFigure) -> Result<String, PlotError> {
    guarded(|| svg_of(|| Chart::new(figure)))
}

/// The PNG image of the profile.
pub fn render_png(figure: &ProfileFigure) -> Result<Vec<u8>, PlotError> {
    guarded(|| png_of(|| Chart::new(figure)))
}

// ---------------------------------------------------------------------------
// What is drawn

/// How many phases a step has ([`PHASES`]).
const N: usize = PHASES.len();
const PHASE_COLORS: [RGBColor; N] = [
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0xa8, 0xa8, 0xa8),
];
const PHASE_NAMES: [&str; N] =
    ["waiting for the batch", "copy to the device", "forward", "backward", "replicas' meeting", "optimizer", "other"];

/// The title's band, above its subtitle and verdict lines.
const TITLE_H: f64 = 52.0;
/// Each line of the subtitle and the verdict.
const LINE_H: f64 = 26.0;
/// The most characters in a line of the subtitle or the verdict: at
/// [`SUBTITLE_SIZE`], DejaVu Sans's widest text of this many characters
/// still fits [`WIDTH`] with a margin.
const LINE_CHARS: usize = 180;
const LEGEND_H: f64 = 44.0;
const ROW_H: f64 = 40.0;
const STEPS_H: f64 = 440.0;
const ROW_LABEL_W: f64 = 150.0;

/// One bar of the first panel.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    label: String,
    /// Milliseconds per step, per phase in [`PHASES`] order.
    ms: [f64; N],
}

/// The second panel.
#[derive(Debug, Clone, PartialEq)]
struct Steps {
    /// The x of each point: the step number, or a group's middle.
    xs: Vec<f64>,
    /// Milliseconds per phase at each point.
    ms: Vec<[f64; N]>,
    /// Steps per point (1 up to [`MAX_POINTS`] steps).
    group: usize,
    /// The top of the drawn data; higher totals are cut.
    top: f64,
    /// The cut points: the step (`"step 3"`, or `"steps 4-6"` for a group) and its total milliseconds.
    cut: Vec<(String, f64)>,
    /// Where each epoch after the first starts, as an x.
    epoch_starts: Vec<(f64, usize)>,
}

#[derive(Debug, Clone, PartialEq)]
struct Chart {
    title: String,
    /// Wrapped to [`LINE_CHARS`].
    subtitle: Vec<String>,
    /// Wrapped to [`LINE_CHARS`].
    verdict: Vec<String>,
    /// The unit of the first panel's axis and labels.
    bars_unit: Unit,
    /// The unit of the second panel's axis.
    steps_unit: Unit,
    /// Each phase's share of the run.
    shares: [f64; N],
    /// The phases in the legend: all but the replicas' meeting of a run on one device.
    shown: Vec<usize>,
    rows: Vec<Row>,
    steps: Steps,
}

fn ms_of(s: &crate::train::profile::StepTiming) -> [f64; N] {
    std::array::from_fn(|k| 1e3 * s.phase(PHASES[k]))
}

fn mean_ms<'a>(steps: impl Iterator<Item = &'a crate::train::profile::StepTiming>) -> [f64; N] {
    let (mut sum, mut n) = ([0.0; N], 0usize);
    for s in steps {
        let ms = ms_of(s);
        for k in 0..N {
            sum[k] += ms[k];
        }
        n += 1;
    }
    sum.map(|v| v / n.max(1) as f64)
}

impl Chart {
    fn new(f: &ProfileFigure) -> Result<Self, PlotError> {
        let steps = &f.profile.steps;
        if steps.is_empty() {
            return Err(PlotError::NoSteps);
        }
        let summary = f.profile.summary();
        let shares: [f64; N] =
            std::array::from_fn(|k| summary.iter().find(|p| p.phase == PHASES[k]).map_or(0.0, |p| p.share));

        // The bars: epochs, grouped evenly when there are too many.
        let mut epochs: Vec<usize> = steps.iter().map(|s| s.epoch).collect();
        epochs.dedup();
        let groups = epochs.len().clamp(1, MAX_ROWS - 1);
        let mut rows: Vec<Row> = (0..groups)
            .map(|g| {
                let chosen = &epochs[g * epochs.len() / groups..(g + 1) * epochs.len() / groups];
                let (a, b) = (chosen[0], chosen[chosen.len() - 1]);
                let label = if a == b { format!("epoch {a}") } else { format!("epochs {a}-{b}") };
                Row { label, ms: mean_ms(steps.iter().filter(|s| (a..=b).contains(&s.epoch))) }
            })
            .collect();
        if groups > 1 {
            rows.push(Row { label: "all steps".into(), ms: mean_ms(steps.iter()) });
        }

        // Every step, or the means of groups of them.
        let group = steps.len().div_ceil(MAX_POINTS);
        let (xs, ms): (Vec<f64>, Vec<[f64; N]>) = steps
            .chunks(group)
            .enumerate()
            .map(|(i, chunk)| ((i * group) as f64 + (chunk.len() as f64 + 1.0) / 2.0, mean_ms(chunk.iter())))
            .unzip();
        let mut totals: Vec<f64> = ms.iter().map(|m| m.iter().sum()).collect();
        totals.sort_by(f64::total_cmp);
        let p95 = totals[((totals.len() - 1) as f64 * 0.95).round() as usize];
        let max = totals[totals.len() - 1];
        let top = if max > 2.0 * p95 && p95 > 0.0 { 2.0 * p95 } else { max.max(1e-6) };
        let cut: Vec<(String, f64)> = ms
            .iter()
            .enumerate()
            .map(|(i, m)| (i, m.iter().sum::<f64>()))
            .filter(|&(_, t)| t > top)
            .map(|(i, t)| {
                let (a, b) = (i * group + 1, ((i + 1) * group).min(steps.len()));
                (if a == b { format!("step {a}") } else { format!("steps {a}-{b}") }, t)
            })
            .collect();
        let epoch_starts = steps
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(i, s)| s.epoch != steps[i - 1].epoch)
            .map(|(i, s)| (i as f64 + 0.5, s.epoch))
            .collect();

        let mean_step: f64 = rows.last().map_or(0.0, |r| r.ms.iter().sum());
        let subtitle = format!(
            "{} profiled step{}, {} per step on average{}{}",
            steps.len(),
            if steps.len() == 1 { "" } else { "s" },
            fmt_ms(mean_step),
            f.profile.between_steps().map_or(String::new(), |b| format!("; {b}")),
            if f.profile.synchronised {
                "; the device was waited for after each phase, which itself costs"
            } else {
                ""
            }
        );
        Ok(Chart {
            title: format!("Where the step time goes: {}", f.title),
            subtitle: wrap(&subtitle, LINE_CHARS),
            verdict: wrap(f.verdict, LINE_CHARS),
            bars_unit: Unit::for_ms(rows.iter().map(|r| r.ms.iter().sum::<f64>()).fold(0.0, f64::max)),
            steps_unit: Unit::for_ms(top),
            shares,
            shown: (0..N).filter(|&k| PHASES[k] != "sync" || f.profile.data_parallel()).collect(),
            rows,
            steps: Steps { xs, ms, group, top, cut, epoch_starts },
        })
    }

    /// The title, subtitle and verdict lines.
    fn head_h(&self) -> f64 {
        TITLE_H + (self.subtitle.len() + self.verdict.len()) as f64 * LINE_H + 14.0
    }

    fn bars_h(&self) -> f64 {
        CAPTION_H + self.rows.len() as f64 * ROW_H + 2.0 * MARGIN + 54.0
    }

    /// The phases, their colours and shares, in one centred line.
    fn draw_legend<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        st: &Style,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let font = st.font(LEGEND_SIZE, TEXT).pos(Pos::new(HPos::Left, VPos::Center));
        let labels: Vec<String> =
            self.shown.iter().map(|&k| format!("{} {:.0}%", PHASE_NAMES[k], 100.0 * self.shares[k])).collect();
        let (swatch, gap) = (st.px(16.0), st.px(28.0));
        let widths: Vec<i32> =
            labels.iter().map(|l| area.estimate_text_size(l, &font).map_or(0, |(w, _)| w as i32)).collect();
        let gaps = labels.len().saturating_sub(1) as i32;
        let total: i32 = widths.iter().map(|w| w + swatch + st.px(8.0)).sum::<i32>() + gap * gaps;
        let (w, h) = area.dim_in_pixel();
        let mut x = (w as i32 - total).max(0) / 2;
        let y = h as i32 / 2;
        for (i, &k) in self.shown.iter().enumerate() {
            area.draw(&Rectangle::new([(x, y - swatch / 2), (x + swatch, y + swatch / 2)], PHASE_COLORS[k].filled()))?;
            area.draw(&Text::new(labels[i].as_str(), (x + swatch + st.px(8.0), y), font.clone()))?;
            x += swatch + st.px(8.0) + widths[i] + gap;
        }
        Ok(())
    }

    /// The first panel: one stacked bar per row, in milliseconds per step.
    fn draw_bars<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        st: &Style,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let (w, _) = area.dim_in_pixel();
        let (cap, plot) = area.split_vertically(st.px(CAPTION_H));
        let unit = self.bars_unit;
        cap.draw_text(
            &format!("The mean step, per epoch ({})", unit.long),
            &st.font(CAPTION_SIZE, TEXT).pos(Pos::new(HPos::Center, VPos::Center)),
            (w as i32 / 2, st.px(CAPTION_H / 2.0 + 4.0)),
        )?;
        let n = self.rows.len();
        let widest = self.rows.iter().map(|r| r.ms.iter().sum::<f64>()).fold(0.0, f64::max).max(1e-6);
        let mut chart = ChartBuilder::on(&plot)
            .margin(st.px(MARGIN))
            .margin_right(st.px(110.0))
            .x_label_area_size(st.px(44.0))
            .y_label_area_size(st.px(ROW_LABEL_W))
            .build_cartesian_2d(0.0..widest * 1.02, -0.5..n as f64 - 0.5)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_labels(8)
            .x_label_formatter(&|v| fmt_tick(*v * unit.per_ms))
            .label_style(st.font(TICK_SIZE, TEXT))
            .bold_line_style(GRID.stroke_width(st.upx(1.0)))
            .light_line_style(TRANSPARENT)
            .axis_style(AXIS.stroke_width(st.upx(1.0)))
            .draw()?;
        let label_font = st.font(TICK_SIZE, TEXT).pos(Pos::new(HPos::Right, VPos::Center));
        let inside = st.font(TICK_SIZE, WHITE).pos(Pos::new(HPos::Center, VPos::Center));
        let after = st.font(TICK_SIZE, TEXT).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, row) in self.rows.iter().enumerate() {
            // The first row at the top.
            let y = (n - 1 - i) as f64;
            let total: f64 = row.ms.iter().sum();
            chart.draw_series(std::iter::once(
                EmptyElement::at((0.0, y)) + Text::new(row.label.clone(), (-st.px(10.0), 0), label_font.clone()),
            ))?;
            let mut x0 = 0.0;
            for (&ms, color) in row.ms.iter().zip(PHASE_COLORS) {
                let x1 = x0 + ms;
                if ms > 0.0 {
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(x0, y - 0.36), (x1, y + 0.36)],
                        color.filled(),
                    )))?;
                    let share = format!("{:.0}%", 100.0 * ms / total.max(1e-12));
                    let px = chart.backend_coord(&(x1, y)).0 - chart.backend_coord(&(x0, y)).0;
                    let need =
                        plot.estimate_text_size(&share, &inside).map_or(i32::MAX, |(w, _)| w as i32 + st.px(6.0));
                    if px >= need {
                        chart.draw_series(std::iter::once(Text::new(share, ((x0 + x1) / 2.0, y), inside.clone())))?;
                    }
                }
                x0 = x1;
            }
            chart.draw_series(std::iter::once(
                EmptyElement::at((total, y)) + Text::new(unit.label(total), (st.px(8.0), 0), after.clone()),
            ))?;
        }
        Ok(())
    }

    /// The second panel: every step's phases stacked, in run order.
    fn draw_steps<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        st: &Style,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let s = &self.steps;
        let (w, _) = area.dim_in_pixel();
        let (cap, plot) = area.split_vertically(st.px(CAPTION_H + 26.0));
        let unit = self.steps_unit;
        // Epochs' starts are grey lines, named on the chart when few and
        // here when many (unnamed, they read as spikes of the steps).
        let lines = if s.epoch_starts.len() >= MAX_ROWS && s.epoch_starts.len() <= 60 {
            "; grey lines: each epoch's start"
        } else {
            ""
        };
        let caption = if s.group > 1 {
            format!("Every step in run order, as means of {} consecutive steps ({}{lines})", s.group, unit.long)
        } else {
            format!("Every step in run order ({}{lines})", unit.long)
        };
        cap.draw_text(
            &caption,
            &st.font(CAPTION_SIZE, TEXT).pos(Pos::new(HPos::Center, VPos::Center)),
            (w as i32 / 2, st.px(CAPTION_H / 2.0 + 4.0)),
        )?;
        if !s.cut.is_empty() {
            let named: Vec<String> = s.cut.iter().take(3).map(|(at, t)| format!("{at} ({})", unit.label(*t))).collect();
            let more = if s.cut.len() > 3 { format!(" and {} more", s.cut.len() - 3) } else { String::new() };
            cap.draw_text(
                &format!("cut at the top: {}{more}", named.join(", ")),
                &st.font(DESC_SIZE, MUTED).pos(Pos::new(HPos::Center, VPos::Center)),
                (w as i32 / 2, st.px(CAPTION_H + 12.0)),
            )?;
        }
        let x_end = s.xs.last().copied().unwrap_or(1.0) + s.group as f64 / 2.0;
        let mut chart = ChartBuilder::on(&plot)
            .margin(st.px(MARGIN))
            .margin_right(st.px(40.0))
            .x_label_area_size(st.px(54.0))
            .y_label_area_size(st.px(84.0))
            .build_cartesian_2d(0.5..x_end.max(1.5), 0.0..s.top * 1.05)?;
        // Few steps: no more labels than steps, each on a whole step.
        let steps = self.steps.xs.len() * self.steps.group;
        chart
            .configure_mesh()
            .x_desc("profiled step")
            .y_desc(unit.long)
            .x_labels(steps.clamp(2, 10))
            .y_labels(6)
            .x_label_formatter(&|v| step_tick(*v))
            .y_label_formatter(&|v| fmt_tick(*v * unit.per_ms))
            .label_style(st.font(TICK_SIZE, TEXT))
            .axis_desc_style(st.font(DESC_SIZE, TEXT))
            .bold_line_style(GRID.stroke_width(st.upx(1.0)))
            .light_line_style(TRANSPARENT)
            .axis_style(AXIS.stroke_width(st.upx(1.0)))
            .draw()?;
        let mut below = vec![0.0; s.ms.len()];
        for k in 0..N {
            let above: Vec<f64> = below.iter().zip(&s.ms).map(|(b, m)| b + m[k]).collect();
            if above.iter().zip(&below).any(|(a, b)| a > b) {
                let clip = |v: f64| v.min(s.top);
                let mut outline: Vec<(f64, f64)> = s.xs.iter().zip(&above).map(|(&x, &a)| (x, clip(a))).collect();
                outline.extend(s.xs.iter().zip(&below).rev().map(|(&x, &b)| (x, clip(b))));
                if s.xs.len() == 1 {
                    // One step: a bar rather than a line.
                    let x = s.xs[0];
                    outline = vec![(x - 0.4, clip(below[0])), (x - 0.4, clip(above[0])), (x + 0.4, clip(above[0]))];
                    outline.push((x + 0.4, clip(below[0])));
                }
                chart.draw_series(std::iter::once(Polygon::new(outline, PHASE_COLORS[k].filled())))?;
            }
            below = above;
        }
        if s.epoch_starts.len() <= 60 {
            let font = st.font(TICK_SIZE, MUTED).pos(Pos::new(HPos::Left, VPos::Top));
            for &(x, epoch) in &s.epoch_starts {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, s.top * 1.05)],
                    RGBColor(0xb8, 0xb8, 0xb8).stroke_width(st.upx(1.0)),
                )))?;
                if s.epoch_starts.len() < MAX_ROWS {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((x, s.top * 1.05))
                            + Text::new(format!("epoch {epoch}"), (st.px(4.0), st.px(4.0)), font.clone()),
                    ))?;
                }
            }
        }
        Ok(())
    }
}

impl Drawing for Chart {
    fn size(&self) -> (u32, u32) {
        (WIDTH as u32, (self.head_h() + LEGEND_H + self.bars_h() + STEPS_H).round() as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, st: &Style) -> Result<(), String> {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let (head, body) = root.split_vertically(st.px(self.head_h()));
        let (w, _) = head.dim_in_pixel();
        let center = |size: f64, color: RGBColor| st.font(size, color).pos(Pos::new(HPos::Center, VPos::Top));
        head.draw_text(&self.title, &center(TITLE_SIZE, TEXT), (w as i32 / 2, st.px(14.0))).map_err(e)?;
        let lines = self.subtitle.iter().map(|l| (l, MUTED)).chain(self.verdict.iter().map(|l| (l, TEXT)));
        for (i, (line, color)) in lines.enumerate() {
            let y = st.px(TITLE_H + i as f64 * LINE_H);
            head.draw_text(line, &center(SUBTITLE_SIZE, color), (w as i32 / 2, y)).map_err(e)?;
        }

        let (legend, body) = body.split_vertically(st.px(LEGEND_H));
        self.draw_legend(&legend, st).map_err(e)?;
        let (bars, steps) = body.split_vertically(st.px(self.bars_h()));
        self.draw_bars(&bars, st).map_err(e)?;
        self.draw_steps(&steps, st).map_err(e)?;
        Ok(())
    }
}

/// Milliseconds in words: `"850 us"`, `"4.20 ms"`, `"12.5 ms"`, `"3.1 s"`.
fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1e3)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{:.0} us", ms * 1e3)
    }
}

/// The unit of a panel's axis and of the values written on it, chosen by
/// the panel's largest value: one unit, never `ms` on the axis and `us`
/// on the bars.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Unit {
    short: &'static str,
    long: &'static str,
    /// Values of this unit in a millisecond.
    per_ms: f64,
}

impl Unit {
    fn for_ms(largest: f64) -> Unit {
        if largest >= 1000.0 {
            Unit { short: "s", long: "seconds", per_ms: 1e-3 }
        } else if largest < 1.0 {
            Unit { short: "us", long: "microseconds", per_ms: 1e3 }
        } else {
            Unit { short: "ms", long: "milliseconds", per_ms: 1.0 }
        }
    }

    /// `ms` milliseconds in this unit: `120 us`, `4.20 ms`, `12.5 ms`.
    fn label(self, ms: f64) -> String {
        let v = ms * self.per_ms;
        let digits = if v >= 100.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            2
        };
        format!("{v:.digits$} {}", self.short)
    }
}

/// Words in lines of at most `width` characters (a longer word alone on its line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// A tick of the steps' axis: whole steps only (a tick between two steps
/// has no label, rather than a rounded one that repeats its neighbour's).
fn step_tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{}", v.round())
    } else {
        String::new()
    }
}

/// An axis tick: as few digits as the value needs.
fn fmt_tick(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::profile::{StepPhases, StepTiming};

    fn step(epoch: usize, step: usize, forward: f64) -> StepTiming {
        StepTiming {
            epoch,
            step,
            start: 0.0,
            wait: 0.001,
            phases: StepPhases { copy: 0.0005, forward, backward: 0.004, sync: 0.0, optimizer: 0.002, in_use: 0 },
            total: 0.0005 + forward + 0.004 + 0.002 + 0.0005,
            prepared: None,
        }
    }

    fn profile(epochs: usize, per_epoch: usize) -> Profile {
        let mut steps = Vec::new();
        for e in 1..=epochs {
            for s in 1..=per_epoch {
                steps.push(step(e, s, 0.003 * e as f64));
            }
        }
        Profile { steps, ..Profile::default() }
    }

    #[test]
    fn bars_are_each_epochs_mean_step_and_the_runs() {
        let p = profile(3, 5);
        let c = Chart::new(&ProfileFigure { title: "t", profile: &p, verdict: "v" }).unwrap();
        let labels: Vec<&str> = c.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["epoch 1", "epoch 2", "epoch 3", "all steps"]);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(c.rows[1].ms[2], 6.0) && close(c.rows[3].ms[2], 6.0), "{:?}", c.rows);
        assert!(close(c.rows[0].ms[0], 1.0) && close(c.rows[0].ms[6], 0.5));
        // Shares add up to the whole, and every step is a point.
        assert!(close(c.shares.iter().sum(), 1.0));
        assert_eq!((c.steps.xs.len(), c.steps.group), (15, 1));
        assert_eq!(c.steps.epoch_starts, [(5.5, 2), (10.5, 3)]);
        assert!(c.steps.cut.is_empty());
    }

    #[test]
    fn a_slow_first_step_is_cut_and_named_and_long_runs_are_grouped() {
        let mut p = profile(2, 50);
        p.steps[0].phases.forward = 9.0;
        p.steps[0].total += 9.0;
        let c = Chart::new(&ProfileFigure { title: "t", profile: &p, verdict: "v" }).unwrap();
        assert_eq!(c.steps.cut.len(), 1);
        assert_eq!(c.steps.cut[0].0, "step 1");
        assert!(c.steps.cut[0].1 > 9000.0);
        assert!(c.steps.top < 100.0, "the axis follows the usual steps: {}", c.steps.top);

        let many = profile(30, 100);
        let c = Chart::new(&ProfileFigure { title: "t", profile: &many, verdict: "v" }).unwrap();
        assert_eq!(c.steps.group, 3);
        assert!(c.steps.xs.len() <= MAX_POINTS);
        assert_eq!(c.rows.len(), MAX_ROWS);
        assert_eq!(c.rows[0].label, "epochs 1-2");
        assert_eq!(c.rows[MAX_ROWS - 2].label, "epochs 28-30");
        // A group's point is the mean of its steps.
        let mean: f64 = many.steps[..3].iter().map(|s| 1e3 * s.phases.forward).sum::<f64>() / 3.0;
        assert!((c.steps.ms[0][2] - mean).abs() < 1e-9);
    }

    #[test]
    fn a_long_verdict_is_wrapped_whole_and_the_chart_grows_for_it() {
        let p = profile(2, 8);
        let long = "compute-bound: the steps' own work is 39% of the run's time, waiting for batches 0%, evaluation \
                    40%, checkpoints 21% (backward is 61% of the steps' time); the model's own arithmetic leads: a \
                    faster device is what helps (bf16 and fp16 run as fp32 here); besides the steps, synchronous \
                    checkpoint saves take 21% of the run's time (2 saves, 0.46 s): `async_save = true` writes them";
        let short = Chart::new(&ProfileFigure { title: "t", profile: &p, verdict: "v" }).unwrap();
        let c = Chart::new(&ProfileFigure { title: "t", profile: &p, verdict: long }).unwrap();
        assert!(c.verdict.len() >= 3, "{:?}", c.verdict);
        assert!(c.verdict.iter().all(|l| l.chars().count() <= LINE_CHARS), "{:?}", c.verdict);
        assert_eq!(c.verdict.join(" "), long.split_whitespace().collect::<Vec<_>>().join(" "));
        assert!(c.size().1 > short.size().1, "the canvas makes room for the lines");
        let svg = render_svg(&ProfileFigure { title: "t", profile: &p, verdict: long }).unwrap();
        assert!(svg.contains("async_save = true` writes them"), "the verdict's end is drawn");
    }

    #[test]
    fn each_panel_has_one_unit_and_the_steps_whole_ticks() {
        // Steps of about 0.12 ms: microseconds on the axis and on the bars.
        let steps = (1..=4)
            .map(|i| StepTiming {
                epoch: 1,
                step: i,
                start: 0.0,
                wait: 0.0,
                phases: StepPhases {
                    copy: 0.0,
                    forward: 60e-6,
                    backward: 40e-6,
                    sync: 0.0,
                    optimizer: 20e-6,
                    in_use: 0,
                },
                total: 120e-6,
                prepared: None,
            })
            .collect();
        let p = Profile { steps, ..Profile::default() };
        let c = Chart::new(&ProfileFigure { title: "t", profile: &p, verdict: "v" }).unwrap();
        assert_eq!((c.bars_unit.short, c.steps_unit.short), ("us", "us"));
        assert_eq!(c.bars_unit.label(0.12), "120 us");
        let svg = render_svg(&ProfileFigure { title: "t", profile: &p, verdict: "v" }).unwrap();
        assert!(svg.contains("(microseconds)") && svg.contains("120 us"), "{svg}");
        assert!(!svg.contains("milliseconds"), "one unit a panel");
        // A 5 s step: seconds.
        assert_eq!(Unit::for_ms(5000.0).label(5000.0), "5.00 s");
        // Ticks between whole steps have no label; none repeats.
        let labels: Vec<String> = (1..=9).map(|i| step_tick(0.5 * i as f64)).filter(|l| !l.is_empty()).collect();
        assert_eq!(labels, ["1", "2", "3", "4"]);
    }

    #[test]
    fn both_files_are_drawn_and_nothing_without_steps() {
        let p = profile(2, 8);
        let f = ProfileFigure { title: "DeepNet on LargeData (cpu)", profile: &p, verdict: "compute-bound" };
        let svg = render_svg(&f).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in ["waiting for the batch", "backward", "epoch 2", "all steps", "compute-bound"] {
            assert!(svg.contains(text), "{text}");
        }
        assert!(!svg.contains("grey lines"), "two epochs' line is named where it is drawn");
        // Too many epochs for a name on each line: the caption says what they are.
        let many = profile(20, 4);
        let svg = render_svg(&ProfileFigure { title: "t", profile: &many, verdict: "v" }).unwrap();
        assert!(svg.contains("grey lines: each epoch&apos;s start") || svg.contains("grey lines: each epoch's start"));
        assert!(!svg.contains("epoch 7<"), "no line is named one by one");
        let png = render_png(&f).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
        let empty = Profile::default();
        let none = render_svg(&ProfileFigure { title: "t", profile: &empty, verdict: "" });
        assert!(matches!(none, Err(PlotError::NoSteps)));
    }
}
