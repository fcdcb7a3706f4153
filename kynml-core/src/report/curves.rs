//! Training curves of a run, drawn as `curves.svg` and `curves.png`.
//!
//! One figure, a title and a grid of panels that share the epoch axis:
//!
//! 1. **Loss**: train and validation loss per epoch, the best validation
//!    epoch marked, and the epoch whose weights the run kept when that is
//!    another (the last epoch without early stopping, the best by
//!    `min_delta` with it). The axis turns logarithmic when the loss spans
//!    more than two decades.
//! 2. **Validation metrics**: scores whose every value lies in `[0, 1]`
//!    (accuracy, f1, precision, recall, auc, a positive r2...) share one panel
//!    on a common scale. The others (mae, rmse, mse, a negative r2...) are
//!    grouped by order of magnitude, one panel per group, so that a metric is
//!    never flattened by one a hundred times larger. The legend gives each
//!    metric's best value (or its last, for names whose direction is unknown).
//! 3. **Learning rate**, logarithmic when it spans more than two decades.
//! 4. **Mixed precision**, only when a loss scale or skipped-step counts are
//!    given: the loss scale (logarithmic, base 2) and, as bars on a second
//!    axis, the optimizer steps skipped for non-finite gradients.
//!
//! Non-finite values (and, on a logarithmic axis, non-positive ones) are left
//! out: a line breaks around them and an isolated point gets a marker. Series
//! shorter or longer than `epochs` are cut to the common length. Legends go in
//! the corner of a panel where they cover the least data; when every corner is
//! taken the axis is stretched to make room.
//!
//! Both files are drawn with `plotters` from the same layout. The SVG names the
//! `sans-serif` family and leaves the font to the viewer. The PNG is rendered at
//! twice its size and scaled down (anti-aliasing), with DejaVu Sans embedded in
//! the binary, so text renders on a machine with no fonts installed; it is
//! encoded here with `flate2` (already in the build through Burn) rather than
//! with the `png` crate, whose dependencies would change the features of crates
//! Burn shares and rebuild it.
//!
//! Drawing never panics on odd input: a panic inside `plotters` is caught and
//! returned as [`PlotError::Draw`].

use std::io::Write as _;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// DejaVu Sans (Bitstream Vera license, see `assets/DejaVuSans-LICENSE.txt`),
/// the font of the PNG's text.
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The training history to draw; every series has one value per epoch.
#[derive(Debug, Clone, Copy)]
pub struct Curves<'a> {
    /// The figure's title, e.g. `"DeepNet on LargeData (cpu)"`.
    pub title: &'a str,
    /// Epoch numbers, 1-based, ascending.
    pub epochs: &'a [usize],
    /// Mean training loss of each epoch.
    pub train_loss: &'a [f64],
    /// Empty when the run has no validation data.
    pub val_loss: &'a [f64],
    /// Learning rate of each epoch.
    pub lr: &'a [f64],
    /// Validation metrics: name and one value per epoch.
    pub metrics: &'a [(String, Vec<f64>)],
    /// The mixed-precision loss scale at the end of each epoch.
    pub loss_scale: Option<&'a [f64]>,
    /// Optimizer steps skipped in each epoch (non-finite gradients).
    pub skipped_steps: Option<&'a [u64]>,
    /// The epoch whose weights are the model the run kept, when it kept one.
    pub kept: Option<usize>,
    /// Why the run ended before the epochs it had asked for, when it did
    /// (the subtitle then says `stopped early at epoch 41 of 80`).
    pub ended: Option<Ended>,
}

/// Why a run ended before its last epoch, with the epochs it had asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ended {
    /// Early stopping ended it.
    Early(usize),
    /// A signal (Ctrl-C) stopped it; its checkpoint goes on from there.
    Interrupted(usize),
    /// Its loss became NaN or infinite.
    NotFinite(usize),
}

/// Why the curves could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// `epochs` is empty.
    #[error("no epochs to draw")]
    NoEpochs,
    /// A profile to draw has no profiled step.
    #[error("no profiled steps to draw")]
    NoSteps,
    /// The embedded DejaVu Sans font could not be registered with `plotters`.
    #[error("the embedded plotting font could not be loaded")]
    Font,
    /// `plotters` failed or panicked while drawing, or PNG encoding failed; holds the message.
    #[error("drawing the figure failed: {0}")]
    Draw(String),
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Draws the curves as an SVG file at `path`.
pub fn draw_svg(curves: &Curves, path: &Path) -> Result<(), PlotError> {
    let svg = render_svg(curves)?;
    write_file(path, svg.as_bytes())
}

/// Draws the curves as a PNG file at `path`.
pub fn draw_png(curves: &Curves, path: &Path) -> Result<(), PlotError> {
    let png = render_png(curves)?;
    write_file(path, &png)
}

/// The SVG document of the curves, for callers that write files themselves.
pub fn render_svg(curves: &Curves) -> Result<String, PlotError> {
    guarded(|| svg_of(|| Figure::new(curves)))
}

/// The PNG image of the curves, for callers that write files themselves.
pub fn render_png(curves: &Curves) -> Result<Vec<u8>, PlotError> {
    guarded(|| png_of(|| Figure::new(curves)))
}

/// A figure laid out once and drawn into either format.
pub(super) trait Drawing {
    /// Its size in pixels, the same in SVG and PNG.
    fn size(&self) -> (u32, u32);
    /// Draws it on `root` with `st`'s sizes.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, st: &Style) -> Result<(), String>;
}

/// The SVG document of the figure `make` lays out (after the embedded font
/// is registered: the SVG names its font, but the layout, legend sizes for
/// one, is measured with the embedded one).
pub(super) fn svg_of<D: Drawing>(make: impl FnOnce() -> Result<D, PlotError>) -> Result<String, PlotError> {
    register_font()?;
    let fig = make()?;
    let (w, h) = fig.size();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        fig.draw(&root, &Style { s: 1.0, bitmap: false }).map_err(PlotError::Draw)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// The PNG image of the figure `make` lays out.
pub(super) fn png_of<D: Drawing>(make: impl FnOnce() -> Result<D, PlotError>) -> Result<Vec<u8>, PlotError> {
    register_font()?;
    let fig = make()?;
    let (w, h) = fig.size();
    // Drawn at twice the size, then averaged down 2x2: plotters' bitmap
    // lines are not anti-aliased, this makes them (and the text) smooth.
    let (bw, bh) = (w * SUPERSAMPLE, h * SUPERSAMPLE);
    let mut big = vec![0u8; bw as usize * bh as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut big, (bw, bh)).into_drawing_area();
        fig.draw(&root, &Style { s: f64::from(SUPERSAMPLE), bitmap: true }).map_err(PlotError::Draw)?;
        root.present().map_err(draw_err)?;
    }
    let small = downsample(&big, bw as usize, bh as usize, SUPERSAMPLE as usize);
    encode_png(&small, w, h).map_err(|e| PlotError::Draw(format!("PNG encoding: {e}")))
}

const SUPERSAMPLE: u32 = 2;

pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), PlotError> {
    crate::atomic_file::write(path, bytes).map_err(|source| PlotError::Write { path: path.to_path_buf(), source })
}

fn draw_err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Runs `f`, turning a panic (of plotters, on input it did not expect) into an
/// error: a failed figure must not take a training run down with it.
pub(super) fn guarded<T>(f: impl FnOnce() -> Result<T, PlotError>) -> Result<T, PlotError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(PlotError::Draw(format!("plotting panicked: {}", kynml_backend::panic_words(payload.as_ref()))))
    })
}

/// Registers the embedded font as plotters' `sans-serif` family (once).
fn register_font() -> Result<(), PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

// ---------------------------------------------------------------------------
// Look

pub(super) const WIDTH: f64 = 1600.0;
const TITLE_H: f64 = 84.0;
const ROW_H: f64 = 470.0;
const STRIP_H: f64 = 330.0;
pub(super) const CAPTION_H: f64 = 34.0;
pub(super) const MARGIN: f64 = 12.0;
const X_LABEL_AREA: f64 = 54.0;
const Y_LABEL_AREA: f64 = 84.0;
const RIGHT_LABEL_AREA: f64 = 74.0;

pub(super) const TITLE_SIZE: f64 = 28.0;
pub(super) const SUBTITLE_SIZE: f64 = 17.0;
pub(super) const CAPTION_SIZE: f64 = 21.0;
pub(super) const DESC_SIZE: f64 = 17.0;
pub(super) const TICK_SIZE: f64 = 15.0;
pub(super) const LEGEND_SIZE: f64 = 15.0;

const LINE_W: f64 = 2.2;
const MARKER_R: f64 = 3.4;
/// At most this many epochs, every point gets a marker.
const MARKERS_UP_TO: usize = 20;

pub(super) const TEXT: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(super) const MUTED: RGBColor = RGBColor(0x55, 0x55, 0x55);
pub(super) const AXIS: RGBColor = RGBColor(0x66, 0x66, 0x66);
pub(super) const GRID: RGBColor = RGBColor(0xe3, 0xe3, 0xe3);
const TRAIN: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const VAL: RGBColor = RGBColor(0xff, 0x7f, 0x0e);
const BEST: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const KEPT: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const LR: RGBColor = RGBColor(0x94, 0x67, 0xbd);
const SCALE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const SKIPPED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
/// Metric colours (Tableau 10, reordered so that the first ones differ most
/// from each other).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Sizes are given for a 1600-pixel-wide figure and multiplied by `s`.
pub(super) struct Style {
    pub(super) s: f64,
    /// Drawing into pixels (PNG) rather than SVG.
    pub(super) bitmap: bool,
}

impl Style {
    pub(super) fn px(&self, v: f64) -> i32 {
        (v * self.s).round() as i32
    }
    pub(super) fn upx(&self, v: f64) -> u32 {
        (v * self.s).round().max(1.0) as u32
    }
    pub(super) fn font(&self, size: f64, color: RGBColor) -> TextStyle<'static> {
        TextStyle {
            font: ("sans-serif", size * self.s).into_font(),
            color: color.to_backend_color(),
            pos: Pos::default(),
        }
    }
}

// ---------------------------------------------------------------------------
// What is drawn: the figure as panels of lines, computed once for both formats

struct Figure {
    title: String,
    subtitle: String,
    x: Axis,
    panels: Vec<Panel>,
}

#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log10,
    Log2,
}

struct Line {
    label: String,
    color: RGBColor,
    /// Runs of consecutive drawable points; a gap separates runs.
    runs: Vec<Vec<(f64, f64)>>,
}

struct Marker {
    label: String,
    color: RGBColor,
    at: (f64, f64),
}

struct Bars {
    label: String,
    color: RGBColor,
    bars: Vec<(f64, f64)>,
    axis: Axis,
}

struct Panel {
    caption: String,
    y_desc: String,
    y: Axis,
    lines: Vec<Line>,
    markers: Vec<Marker>,
    /// Drawn on a second y axis on the right when there are lines, else on the
    /// main one.
    bars: Option<Bars>,
    /// Scores: the y axis is not stretched beyond 1 to make room for the legend.
    unit: bool,
    /// Takes the whole width of the figure (the odd one out, at the bottom).
    wide: bool,
}

impl Figure {
    fn new(c: &Curves) -> Result<Self, PlotError> {
        if c.epochs.is_empty() {
            return Err(PlotError::NoEpochs);
        }
        let xs: Vec<f64> = c.epochs.iter().map(|&e| e as f64).collect();
        let x = epoch_axis(&xs);

        let mut panels = vec![loss_panel(c, &xs)];
        panels.extend(metric_panels(c, &xs));
        panels.push(lr_panel(c, &xs));
        if let Some(p) = mixed_precision_panel(c, &xs) {
            panels.push(p);
        }
        if panels.len() % 2 == 1 {
            if let Some(last) = panels.last_mut() {
                last.wide = true;
            }
        }
        let subtitle = subtitle(c, &xs);
        Ok(Figure { title: c.title.to_string(), subtitle, x, panels })
    }

    fn rows(&self) -> (usize, bool) {
        let wide = self.panels.iter().any(|p| p.wide);
        ((self.panels.len() - usize::from(wide)) / 2, wide)
    }
}

impl Drawing for Figure {
    fn size(&self) -> (u32, u32) {
        let (rows, wide) = self.rows();
        let h = TITLE_H + rows as f64 * ROW_H + if wide { STRIP_H } else { 0.0 };
        (WIDTH as u32, h.round() as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, st: &Style) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (title_area, body) = root.split_vertically(st.px(TITLE_H));
        let (tw, _) = title_area.dim_in_pixel();
        title_area
            .draw_text(
                &self.title,
                &st.font(TITLE_SIZE, TEXT).pos(Pos::new(HPos::Center, VPos::Top)),
                (tw as i32 / 2, st.px(14.0)),
            )
            .map_err(|e| e.to_string())?;
        title_area
            .draw_text(
                &self.subtitle,
                &st.font(SUBTITLE_SIZE, MUTED).pos(Pos::new(HPos::Center, VPos::Top)),
                (tw as i32 / 2, st.px(52.0)),
            )
            .map_err(|e| e.to_string())?;

        let (rows, wide) = self.rows();
        let mut rest = body;
        let mut panels = self.panels.iter();
        for _ in 0..rows {
            let (row, below) = rest.split_vertically(st.px(ROW_H));
            rest = below;
            let (left, right) = row.split_horizontally(st.px(WIDTH / 2.0));
            for area in [left, right] {
                if let Some(p) = panels.next() {
                    draw_panel(&area, p, &self.x, st)?;
                }
            }
        }
        if wide {
            if let Some(p) = panels.next() {
                draw_panel(&rest, p, &self.x, st)?;
            }
        }
        Ok(())
    }
}

fn subtitle(c: &Curves, xs: &[f64]) -> String {
    let n = xs.len();
    let mut parts = vec![if n == 1 { "1 epoch".to_string() } else { format!("{n} epochs") }];
    match (c.ended, c.epochs.last()) {
        (Some(Ended::Early(of)), Some(&at)) => parts[0] = format!("stopped early at epoch {at} of {of}"),
        (Some(Ended::Interrupted(of)), Some(&at)) => parts[0] = format!("interrupted after epoch {at} of {of}"),
        (Some(Ended::NotFinite(of)), Some(&at)) => {
            parts[0] = format!("stopped after epoch {at} of {of}: the loss was not a number")
        }
        _ => {}
    }
    let lowest = best(xs, c.val_loss, false);
    if let Some((e, v)) = lowest {
        parts.push(format!("best validation loss {} at epoch {e}", fmt_value(v)));
    }
    if let Some(k) = c.kept.filter(|&k| lowest.is_none_or(|(e, _)| e != k)) {
        parts.push(format!("model kept: epoch {k}"));
    }
    if let Some((e, v)) = last(xs, c.train_loss) {
        parts.push(format!("train loss {} at epoch {e}", fmt_value(v)));
    }
    // A metric with no finite value has no line to draw: said here.
    let absent: Vec<&str> = c
        .metrics
        .iter()
        .filter(|(_, values)| finite_range(&values[..values.len().min(n)]).is_none())
        .map(|(name, _)| name.as_str())
        .collect();
    if !absent.is_empty() {
        parts.push(format!("{} not a number at any epoch", absent.join(", ")));
    }
    parts.join("   ·   ")
}

fn loss_panel(c: &Curves, xs: &[f64]) -> Panel {
    let series = [("train", TRAIN, c.train_loss), ("validation", VAL, c.val_loss)];
    let all: Vec<f64> = series.iter().flat_map(|(_, _, v)| v.iter().take(xs.len()).copied()).collect();
    let scale = auto_scale(&all, 100.0, Scale::Log10);
    let mut lines = Vec::new();
    for (label, color, values) in series {
        let runs = runs(xs, values, scale);
        if !runs.is_empty() {
            lines.push(Line { label: label.to_string(), color, runs });
        }
    }
    let drawn = |&(_, v): &(usize, f64)| usable(v) && (scale == Scale::Linear || v > 0.0);
    let lowest = best(xs, c.val_loss, false);
    let mut markers: Vec<Marker> = lowest
        .filter(drawn)
        .map(|(e, v)| Marker {
            label: if c.kept == Some(e) {
                format!("best validation, kept: {} (epoch {e})", fmt_value(v))
            } else {
                format!("best validation: {} (epoch {e})", fmt_value(v))
            },
            color: BEST,
            at: (e as f64, v),
        })
        .into_iter()
        .collect();
    // The model's own epoch, where it is not the lowest loss's.
    let kept = c.kept.filter(|&k| lowest.is_none_or(|(e, _)| e != k));
    if let Some(k) = kept {
        let at = xs.iter().position(|&x| x == k as f64).and_then(|i| c.val_loss.get(i).map(|&v| (k, v)));
        markers.extend(at.filter(drawn).map(|(e, v)| Marker {
            label: format!("model kept: {} (epoch {e})", fmt_value(v)),
            color: KEPT,
            at: (e as f64, v),
        }));
    }
    let y = value_axis(&all, scale, Bounds::NonNegativeIfSo);
    let desc = if scale == Scale::Linear { "loss" } else { "loss (log scale)" };
    Panel {
        caption: "Loss".to_string(),
        y_desc: desc.to_string(),
        y,
        lines,
        markers,
        bars: None,
        unit: false,
        wide: false,
    }
}

fn lr_panel(c: &Curves, xs: &[f64]) -> Panel {
    let values: Vec<f64> = c.lr.iter().take(xs.len()).copied().collect();
    // Lower threshold than for the loss: a step decay by 10x twice reads
    // better on a log axis.
    let scale = auto_scale(&values, 10.0, Scale::Log10);
    let runs = runs(xs, &values, scale);
    let lines = if runs.is_empty() { Vec::new() } else { vec![Line { label: String::new(), color: LR, runs }] };
    let desc = if scale == Scale::Linear { "learning rate" } else { "learning rate (log scale)" };
    Panel {
        caption: "Learning rate".to_string(),
        y_desc: desc.to_string(),
        y: value_axis(&values, scale, Bounds::NonNegativeIfSo),
        lines,
        markers: Vec::new(),
        bars: None,
        unit: false,
        wide: false,
    }
}

fn mixed_precision_panel(c: &Curves, xs: &[f64]) -> Option<Panel> {
    if c.loss_scale.is_none() && c.skipped_steps.is_none() {
        return None;
    }
    let mut lines = Vec::new();
    let mut y = value_axis(&[], Scale::Linear, Bounds::Free);
    let mut y_desc = String::new();
    if let Some(scale_values) = c.loss_scale {
        let values: Vec<f64> = scale_values.iter().take(xs.len()).copied().collect();
        // Dynamic loss scaling halves and doubles: powers of 2 on a log axis.
        let scale = auto_scale(&values, 0.0, Scale::Log2);
        let runs = runs(xs, &values, scale);
        if !runs.is_empty() {
            lines.push(Line { label: "loss scale".to_string(), color: SCALE, runs });
        }
        y = value_axis(&values, scale, Bounds::NonNegativeIfSo);
        y_desc = if scale == Scale::Linear { "loss scale" } else { "loss scale (log scale)" }.to_string();
    }
    let bars = c.skipped_steps.map(|skipped| {
        let bars: Vec<(f64, f64)> = xs.iter().zip(skipped).map(|(&x, &s)| (x, s as f64)).collect();
        let total: u64 = skipped.iter().take(xs.len()).fold(0u64, |a, &s| a.saturating_add(s));
        let max = bars.iter().map(|b| b.1).fold(0.0, f64::max);
        Bars { label: format!("skipped steps (total {total})"), color: SKIPPED, bars, axis: count_axis(max) }
    });
    if lines.is_empty() {
        if let Some(b) = &bars {
            y = b.axis.clone();
            y_desc = "skipped steps".to_string();
        }
    }
    Some(Panel {
        caption: "Mixed precision".to_string(),
        y_desc,
        y,
        lines,
        markers: Vec::new(),
        bars,
        unit: false,
        wide: false,
    })
}

/// Metrics that are better when lower, and when higher, by name.
fn direction(name: &str) -> Option<bool> {
    let n = name.to_ascii_lowercase();
    const LOWER: [&str; 7] = ["loss", "mae", "mse", "rmse", "error", "mape", "perplexity"];
    const HIGHER: [&str; 12] =
        ["acc", "f1", "precision", "recall", "auc", "r2", "iou", "dice", "kappa", "mcc", "jaccard", "score"];
    if LOWER.iter().any(|k| n.contains(k)) {
        Some(false)
    } else if HIGHER.iter().any(|k| n.contains(k)) {
        Some(true)
    } else {
        None
    }
}

struct MetricInfo<'m> {
    index: usize,
    name: &'m str,
    values: Vec<f64>,
    lo: f64,
    hi: f64,
}

/// Metrics with all values in [0, 1] in one panel; the others grouped so that
/// a group's largest magnitude is at most ten times its smallest.
fn metric_panels(c: &Curves, xs: &[f64]) -> Vec<Panel> {
    let mut unit = Vec::new();
    let mut other: Vec<MetricInfo> = Vec::new();
    for (index, (name, values)) in c.metrics.iter().enumerate() {
        let values: Vec<f64> = values.iter().take(xs.len()).copied().collect();
        let Some((lo, hi)) = finite_range(&values) else {
            continue;
        };
        let m = MetricInfo { index, name, values, lo, hi };
        // An error (mae below 1) is not a score, where higher is better.
        if lo >= 0.0 && hi <= 1.0 && direction(name) != Some(false) {
            unit.push(m);
        } else {
            other.push(m);
        }
    }
    let mut groups: Vec<Vec<MetricInfo>> = Vec::new();
    if !unit.is_empty() {
        groups.push(unit);
    }
    other.sort_by(|a, b| magnitude(a).total_cmp(&magnitude(b)));
    let mut current: Vec<MetricInfo> = Vec::new();
    for m in other {
        let fits = match current.first() {
            // Metrics that go negative (r2 early on) keep a panel of their own.
            Some(first) => {
                first.lo >= 0.0 && m.lo >= 0.0 && magnitude(&m) <= 10.0 * magnitude(first).max(f64::MIN_POSITIVE)
            }
            None => true,
        };
        if !fits {
            groups.push(std::mem::take(&mut current));
        }
        current.push(m);
    }
    if !current.is_empty() {
        groups.push(current);
    }
    let only = groups.len() == 1;
    groups.into_iter().map(|g| metric_panel(g, xs, only)).collect()
}

fn magnitude(m: &MetricInfo) -> f64 {
    m.lo.abs().max(m.hi.abs())
}

fn metric_panel(group: Vec<MetricInfo>, xs: &[f64], only: bool) -> Panel {
    let unit = group.iter().all(|m| m.lo >= 0.0 && m.hi <= 1.0 && direction(m.name) != Some(false));
    // A score bounded above by 1 that goes far below 0 (r2 of the first
    // epochs) would squash the rest: its axis stops at -1, lower values are
    // drawn at -1 and the legend says so.
    let floor = (!unit && group.iter().all(|m| m.hi <= 1.0 && direction(m.name) == Some(true)))
        .then_some(-1.0)
        // Where every value is below it (a short run's r2 of -22 to -21),
        // the floor would draw them all as one flat line at -1: the values
        // are drawn as they are instead.
        .filter(|f| group.iter().any(|m| m.lo < *f) && group.iter().any(|m| m.hi >= *f));
    let mut all = Vec::new();
    let mut lines = Vec::new();
    let names: Vec<&str> = group.iter().map(|m| m.name).collect();
    let mut values_by_metric = Vec::new();
    for m in &group {
        let mut values = m.values.clone();
        if let Some(f) = floor {
            for v in values.iter_mut().filter(|v| v.is_finite()) {
                *v = v.max(f);
            }
        }
        all.extend(values.iter().copied());
        values_by_metric.push(values);
    }
    let scale = if unit { Scale::Linear } else { auto_scale(&all, 100.0, Scale::Log10) };
    for (m, values) in group.iter().zip(&values_by_metric) {
        let runs = runs(xs, values, scale);
        if runs.is_empty() {
            continue;
        }
        let summary = match direction(m.name) {
            Some(higher) => best(xs, &m.values, higher).map(|(e, v)| format!("best {} (epoch {e})", fmt_value(v))),
            None => last(xs, &m.values).map(|(e, v)| format!("last {} (epoch {e})", fmt_value(v))),
        };
        let mut label = match summary {
            Some(s) => format!("{}: {s}", m.name),
            None => m.name.to_string(),
        };
        if floor.is_some_and(|f| m.lo < f) {
            label.push_str(", clipped at -1");
        }
        lines.push(Line { label, color: PALETTE[m.index % PALETTE.len()], runs });
    }
    let bounds = if unit { Bounds::Unit } else { Bounds::NonNegativeIfSo };
    let mut y = value_axis(&all, scale, bounds);
    if let Some(f) = floor {
        y.lo = f;
        y.ticks = ticks(y.lo, y.hi, y.scale);
    }
    let caption =
        if only && unit { "Validation metrics".to_string() } else { format!("Validation {}", names.join(", ")) };
    let desc = match (unit, names.as_slice(), scale) {
        (true, _, _) => "score".to_string(),
        (false, [one], Scale::Linear) => one.to_string(),
        (false, [one], _) => format!("{one} (log scale)"),
        (false, _, Scale::Linear) => "value".to_string(),
        (false, _, _) => "value (log scale)".to_string(),
    };
    Panel { caption, y_desc: desc, y, lines, markers: Vec::new(), bars: None, unit, wide: false }
}

// ---------------------------------------------------------------------------
// Series helpers

/// Values that can be drawn: finite and not absurdly large.
fn usable(v: f64) -> bool {
    v.is_finite() && v.abs() < 1e100
}

fn drawable(v: f64, scale: Scale) -> bool {
    usable(v) && (scale == Scale::Linear || v > 0.0)
}

fn finite_range(values: &[f64]) -> Option<(f64, f64)> {
    values.iter().copied().filter(|v| usable(*v)).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// `log` when all values are positive and their max/min is above `ratio`.
fn auto_scale(values: &[f64], ratio: f64, log: Scale) -> Scale {
    let usable_values: Vec<f64> = values.iter().copied().filter(|v| usable(*v)).collect();
    if usable_values.is_empty() || usable_values.iter().any(|&v| v <= 0.0) {
        return Scale::Linear;
    }
    match finite_range(&usable_values) {
        Some((lo, hi)) if hi / lo > ratio => log,
        _ => Scale::Linear,
    }
}

/// Splits `(epoch, value)` pairs into runs of drawable points.
fn runs(xs: &[f64], values: &[f64], scale: Scale) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for (&x, &v) in xs.iter().zip(values) {
        if drawable(v, scale) {
            run.push((x, v));
        } else if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}

/// The best `(epoch, value)`: the highest if `higher`, else the lowest.
fn best(xs: &[f64], values: &[f64], higher: bool) -> Option<(usize, f64)> {
    xs.iter()
        .zip(values)
        .filter(|(_, v)| usable(**v))
        .fold(None, |acc: Option<(f64, f64)>, (&x, &v)| match acc {
            Some((_, b)) if (higher && v <= b) || (!higher && v >= b) => acc,
            _ => Some((x, v)),
        })
        .map(|(x, v)| (x as usize, v))
}

fn last(xs: &[f64], values: &[f64]) -> Option<(usize, f64)> {
    xs.iter().zip(values).rev().find(|(_, v)| usable(**v)).map(|(&x, &v)| (x as usize, v))
}

// ---------------------------------------------------------------------------
// Axes: one coordinate type for linear and log axes, with chosen ticks

#[derive(Clone)]
struct Axis {
    lo: f64,
    hi: f64,
    scale: Scale,
    ticks: Vec<f64>,
    /// Epoch axis: only whole numbers are labelled.
    integer: bool,
}

impl Axis {
    fn to_unit(&self, v: f64) -> f64 {
        let (a, b, v) = match self.scale {
            Scale::Linear => (self.lo, self.hi, v),
            Scale::Log10 | Scale::Log2 => (self.lo.ln(), self.hi.ln(), v.max(f64::MIN_POSITIVE).ln()),
        };
        let t = (v - a) / (b - a);
        if t.is_finite() {
            t.clamp(-4.0, 5.0)
        } else {
            0.0
        }
    }

    fn at_unit(&self, t: f64) -> f64 {
        match self.scale {
            Scale::Linear => self.lo + t * (self.hi - self.lo),
            Scale::Log10 | Scale::Log2 => (self.lo.ln() + t * (self.hi.ln() - self.lo.ln())).exp(),
        }
    }

    fn label(&self, v: f64) -> String {
        if self.integer {
            return if (v - v.round()).abs() < 1e-6 { format!("{}", v.round() as i64) } else { String::new() };
        }
        match self.scale {
            Scale::Linear => fmt_tick(v, tick_step(&self.ticks), self.lo.abs().max(self.hi.abs())),
            Scale::Log10 => {
                if self.ticks.iter().any(|t| !(1e-3..1e5).contains(&t.abs())) {
                    fmt_sci(v, 3)
                } else {
                    fmt_sig(v, 3)
                }
            }
            Scale::Log2 => {
                if (1.0..1e7).contains(&v) {
                    format!("{}", v.round() as i64)
                } else {
                    format!("2^{}", v.log2().round() as i64)
                }
            }
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = self.to_unit(*value);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

fn epoch_axis(xs: &[f64]) -> Axis {
    let (lo, hi) = finite_range(xs).unwrap_or((1.0, 1.0));
    let pad = ((hi - lo) * 0.02).max(0.5);
    let step = nice_step((hi - lo) / 8.0).max(1.0).round();
    let mut ticks = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + 1e-9 && ticks.len() < 64 {
        ticks.push(t);
        t += step;
    }
    Axis { lo: lo - pad, hi: hi + pad, scale: Scale::Linear, ticks, integer: true }
}

#[derive(Clone, Copy, PartialEq)]
enum Bounds {
    /// Scores: the axis stays within [0, 1].
    Unit,
    /// When all values are >= 0, the axis does not go below 0.
    NonNegativeIfSo,
    Free,
}

/// An axis around `values` (drawable ones) with some room at both ends.
fn value_axis(values: &[f64], scale: Scale, bounds: Bounds) -> Axis {
    let drawn: Vec<f64> = values.iter().copied().filter(|&v| drawable(v, scale)).collect();
    let (lo, hi) = match (finite_range(&drawn), scale) {
        (Some(r), _) => r,
        (None, Scale::Linear) => (0.0, 1.0),
        (None, _) => (1.0, 10.0),
    };
    let (lo, hi) = match scale {
        Scale::Linear => {
            let span = hi - lo;
            let (mut a, mut b) = if span <= 1e-12 * lo.abs().max(hi.abs()).max(1e-300) {
                let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.25 };
                (lo - d, hi + d)
            } else {
                (lo - span * 0.06, hi + span * 0.06)
            };
            if bounds != Bounds::Free && lo >= 0.0 {
                // Close to 0 (a loss): start at 0, else just not below it.
                a = if lo <= 0.25 * span { 0.0 } else { a.max(0.0) };
            }
            if bounds == Bounds::Unit {
                b = b.min(1.0).max(hi);
                if b <= a {
                    b = a + 0.1;
                }
            }
            (a, b)
        }
        Scale::Log10 => {
            let f = (hi / lo).powf(0.05).max(1.15);
            (lo / f, hi * f)
        }
        Scale::Log2 => {
            // From the power of 2 at or below to the one at or above, at
            // least two of them.
            let (mut a, mut b) = (lo.log2().floor(), hi.log2().ceil());
            if a == b {
                a -= 1.0;
                b += 1.0;
            }
            (2f64.powf(a) / 1.15, 2f64.powf(b) * 1.15)
        }
    };
    Axis { lo, hi, scale, ticks: ticks(lo, hi, scale), integer: false }
}

/// An axis for counts, from 0.
fn count_axis(max: f64) -> Axis {
    let hi = if max > 0.0 { max * 1.15 } else { 1.0 };
    let step = nice_step(hi / 5.0).max(1.0).round();
    let mut ticks = Vec::new();
    let mut t = 0.0;
    while t <= hi && ticks.len() < 64 {
        ticks.push(t);
        t += step;
    }
    Axis { lo: 0.0, hi, scale: Scale::Linear, ticks, integer: true }
}

/// A round step (1, 2, 2.5 or 5 times a power of ten) close to `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm < 1.5 {
        1.0
    } else if norm < 2.25 {
        2.0
    } else if norm < 3.5 {
        2.5
    } else if norm < 7.5 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn ticks(lo: f64, hi: f64, scale: Scale) -> Vec<f64> {
    let mut out = Vec::new();
    match scale {
        Scale::Linear => {
            let step = nice_step((hi - lo) / 6.0);
            let mut i = (lo / step).ceil();
            while i * step <= hi + step * 1e-9 && out.len() < 64 {
                let t = i * step;
                out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
                i += 1.0;
            }
        }
        Scale::Log10 => {
            let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
            let decades = d1 - d0;
            let (mults, every): (&[f64], i32) = match decades {
                ..=2 => (&[1.0, 2.0, 5.0], 1),
                3..=4 => (&[1.0, 3.0], 1),
                5..=7 => (&[1.0], 1),
                _ => (&[1.0], (decades + 6) / 7),
            };
            for d in (d0..=d1).filter(|d| (d - d0) % every == 0) {
                for m in mults {
                    let t = m * 10f64.powi(d);
                    if t >= lo && t <= hi {
                        out.push(t);
                    }
                }
            }
        }
        Scale::Log2 => {
            let (k0, k1) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
            let every = ((k1 - k0 + 1) / 7).max(1);
            for k in (k0..=k1).filter(|k| (k - k0) % every == 0) {
                out.push(2f64.powi(k));
            }
        }
    }
    if out.len() < 2 && scale != Scale::Linear {
        out = vec![lo, hi];
    }
    out
}

fn tick_step(ticks: &[f64]) -> f64 {
    match ticks {
        [a, b, ..] => (b - a).abs(),
        _ => 1.0,
    }
}

/// A linear tick label, with as many decimals as the tick step needs.
fn fmt_tick(v: f64, step: f64, magnitude: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    let mut decimals = (-step.log10() - 1e-9).ceil().max(0.0) as usize;
    let scaled = step * 10f64.powi(decimals as i32);
    if (scaled - scaled.round()).abs() > 1e-6 * scaled.max(1.0) {
        decimals += 1;
    }
    // Values of a tenth or more read best as decimals, however fine the
    // step (r2 ticks read `-1.773e-1` for -0.1773); tiny ones as powers.
    if (decimals > 3 && magnitude < 1e-2) || decimals > 6 || magnitude >= 1e5 {
        // As many significant digits as the step needs: 6e-4, 1.2e-3.
        let k = step.log10().floor();
        let extra = if (step / 10f64.powf(k) - 2.5).abs() < 1e-6 { 1.0 } else { 0.0 };
        let sig = v.abs().log10().floor() - k + 1.0 + extra;
        return fmt_sci(v, sig.clamp(1.0, 6.0) as usize);
    }
    format!("{v:.decimals$}")
}

/// A value for a legend or a log axis: 4 significant digits, trimmed.
fn fmt_value(v: f64) -> String {
    fmt_sig(v, 4)
}

fn fmt_sig(v: f64, sig: usize) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        return fmt_sci(v, sig);
    }
    let decimals = (sig as i32 - 1 - a.log10().floor() as i32).max(0) as usize;
    trim_zeros(&format!("{v:.decimals$}")).to_string()
}

/// Scientific notation, `sig` significant digits, trailing zeros trimmed.
fn fmt_sci(v: f64, sig: usize) -> String {
    let s = format!("{:.*e}", sig.saturating_sub(1), v);
    match s.split_once('e') {
        Some((mant, exp)) => format!("{}e{exp}", trim_zeros(mant)),
        None => s,
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

// ---------------------------------------------------------------------------
// Drawing one panel

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    x: &Axis,
    st: &Style,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (w, _) = area.dim_in_pixel();
    let (cap, plot) = area.split_vertically(st.px(CAPTION_H));
    cap.draw_text(
        &p.caption,
        &st.font(CAPTION_SIZE, TEXT).pos(Pos::new(HPos::Center, VPos::Center)),
        (w as i32 / 2, st.px(CAPTION_H / 2.0 + 4.0)),
    )
    .map_err(e)?;

    let secondary = p.bars.is_some() && !p.lines.is_empty();
    let right = if secondary { RIGHT_LABEL_AREA } else { 0.0 };
    let (pw, ph) = plot.dim_in_pixel();
    let plot_w = f64::from(pw) - st.s * (2.0 * MARGIN + Y_LABEL_AREA + right);
    let plot_h = f64::from(ph) - st.s * (2.0 * MARGIN + X_LABEL_AREA);
    if plot_w < 20.0 || plot_h < 20.0 {
        return Ok(());
    }

    // Legend entries, then the corner they cover least (and the room to make).
    let mut labels: Vec<&str> = p.lines.iter().filter(|l| !l.label.is_empty()).map(|l| l.label.as_str()).collect();
    for m in &p.markers {
        labels.push(&m.label);
    }
    if let Some(b) = &p.bars {
        labels.push(&b.label);
    }
    let legend_font = st.font(LEGEND_SIZE, TEXT);
    let mut y = p.y.clone();
    let mut bars_axis = p.bars.as_ref().map(|b| b.axis.clone());
    let position = if labels.is_empty() {
        None
    } else {
        let text_w = labels
            .iter()
            .map(|l| plot.estimate_text_size(l, &legend_font).map(|(w, _)| f64::from(w)).unwrap_or(0.0))
            .fold(0.0, f64::max);
        let box_w = text_w + st.s * (LEGEND_GLYPH + 2.0 * LEGEND_MARGIN + 10.0);
        let box_h = st.s * (labels.len() as f64 * LEGEND_SIZE * 1.25 + 2.0 * LEGEND_MARGIN + 8.0);
        let (pos, factor, upper) = place_legend(p, x, &y, bars_axis.as_ref(), box_w / plot_w, box_h / plot_h);
        if factor > 1.0 {
            if secondary {
                // The lines keep their axis; the bars (from 0) are squeezed down.
                if let Some(b) = bars_axis.as_mut() {
                    if upper {
                        b.hi *= factor;
                    }
                }
            }
            stretch(&mut y, factor, upper);
        }
        Some(pos)
    };

    let mut builder = ChartBuilder::on(&plot);
    builder.margin(st.px(MARGIN)).x_label_area_size(st.px(X_LABEL_AREA)).y_label_area_size(st.px(Y_LABEL_AREA));
    if secondary {
        builder.right_y_label_area_size(st.px(RIGHT_LABEL_AREA));
    }
    let chart = builder.build_cartesian_2d(x.clone(), y.clone()).map_err(e)?;
    // Always a dual chart (the second axis unused without bars): attaching it
    // is what keeps the main axis' labels out of the right label area.
    let baxis = bars_axis.unwrap_or_else(|| count_axis(1.0));
    let mut chart = chart.set_secondary_coord(x.clone(), baxis.clone());
    let xfmt = |v: &f64| x.label(*v);
    let yfmt = |v: &f64| y.label(*v);
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc(p.y_desc.as_str())
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .label_style(st.font(TICK_SIZE, TEXT))
        .axis_desc_style(st.font(DESC_SIZE, TEXT))
        .bold_line_style(GRID.stroke_width(st.upx(1.0)))
        .light_line_style(TRANSPARENT)
        .axis_style(AXIS.stroke_width(st.upx(1.0)))
        .set_all_tick_mark_size(st.px(5.0))
        .draw()
        .map_err(e)?;

    // Bars first, so that lines are drawn over them.
    if let Some(b) = &p.bars {
        let bar_half = 0.3_f64.min((x.hi - x.lo) / 8.0);
        let rects: Vec<Rectangle<(f64, f64)>> = b
            .bars
            .iter()
            .filter(|(_, v)| *v > 0.0)
            .map(|&(bx, v)| Rectangle::new([(bx - bar_half, 0.0), (bx + bar_half, v)], b.color.mix(0.45).filled()))
            .collect();
        let c = b.color;
        let g = st.px(LEGEND_GLYPH - 6.0);
        let h = st.px(LEGEND_SIZE * 0.35);
        let glyph = move |(lx, ly): (i32, i32)| Rectangle::new([(lx, ly - h), (lx + g, ly + h)], c.mix(0.45).filled());
        if secondary {
            let bfmt = |v: &f64| baxis.label(*v);
            chart
                .configure_secondary_axes()
                .y_desc("skipped steps")
                .y_label_formatter(&bfmt)
                .label_style(st.font(TICK_SIZE, TEXT))
                .axis_desc_style(st.font(DESC_SIZE, TEXT))
                .axis_style(AXIS.stroke_width(st.upx(1.0)))
                .set_all_tick_mark_size(st.px(5.0))
                .draw()
                .map_err(e)?;
            chart.draw_secondary_series(rects).map_err(e)?.label(b.label.as_str()).legend(glyph);
        } else {
            chart.draw_series(rects).map_err(e)?.label(b.label.as_str()).legend(glyph);
        }
    }

    let all_points = p.lines.iter().map(|l| l.runs.iter().map(Vec::len).sum::<usize>()).max().unwrap_or(0);
    let markers = all_points <= MARKERS_UP_TO;
    let width = st.upx(LINE_W);
    let radius = st.px(MARKER_R);
    let glyph_len = st.px(LEGEND_GLYPH - 6.0);
    for line in &p.lines {
        let style = line.color.stroke_width(width);
        let mut first = true;
        for run in &line.runs {
            let anno = if st.bitmap {
                // plotters' polygon fill draws wide steep segments too thin;
                // a round brush stamped along the path keeps the width even.
                let area = chart.plotting_area().strip_coord_spec();
                let base = chart.plotting_area().get_base_pixel();
                let to_px = |pt: &(f64, f64)| {
                    let (bx, by) = chart.backend_coord(pt);
                    (f64::from(bx - base.0), f64::from(by - base.1))
                };
                let brush = (f64::from(width) / 2.0).round().max(1.0) as i32;
                let mut dabs = Vec::new();
                for w in run.windows(2) {
                    let (a, b) = (to_px(&w[0]), to_px(&w[1]));
                    let steps = (b.0 - a.0).hypot(b.1 - a.1).ceil().clamp(1.0, 100_000.0) as usize;
                    for k in 0..=steps {
                        let t = k as f64 / steps as f64;
                        dabs.push(((a.0 + t * (b.0 - a.0)).round() as i32, (a.1 + t * (b.1 - a.1)).round() as i32));
                    }
                }
                dabs.dedup();
                for d in dabs {
                    area.draw(&Circle::new(d, brush, line.color.filled())).map_err(e)?;
                }
                // An empty series, for the legend entry.
                chart.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>()).map_err(e)?
            } else {
                chart.draw_series(LineSeries::new(run.iter().copied(), style)).map_err(e)?
            };
            if first && !line.label.is_empty() {
                let c = line.color;
                anno.label(line.label.as_str()).legend(move |(lx, ly)| {
                    PathElement::new(vec![(lx, ly), (lx + glyph_len, ly)], c.stroke_width(width))
                });
            }
            first = false;
            if markers || run.len() == 1 {
                chart.draw_series(run.iter().map(|&pt| Circle::new(pt, radius, line.color.filled()))).map_err(e)?;
            }
        }
    }
    for m in &p.markers {
        let c = m.color;
        let r = st.px(MARKER_R + 2.6);
        let ring = st.upx(1.5);
        let glyph_mid = glyph_len / 2;
        chart
            .draw_series(std::iter::once(Circle::new(m.at, r, c.stroke_width(ring))))
            .map_err(e)?
            .label(m.label.as_str())
            .legend(move |(lx, ly)| Circle::new((lx + glyph_mid, ly), r, c.stroke_width(ring)));
    }

    if p.lines.is_empty() && p.bars.is_none() {
        plot.draw_text(
            "no finite values",
            &st.font(DESC_SIZE, MUTED).pos(Pos::new(HPos::Center, VPos::Center)),
            (pw as i32 / 2, ph as i32 / 2),
        )
        .map_err(e)?;
    }
    if let Some(pos) = position {
        legend(&mut chart, pos, st).map_err(e)?;
    }
    Ok(())
}

const LEGEND_GLYPH: f64 = 34.0;
const LEGEND_MARGIN: f64 = 8.0;

fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<Axis, Axis>>,
    pos: SeriesLabelPosition,
    st: &Style,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(pos)
        .legend_area_size(st.px(LEGEND_GLYPH))
        .margin(st.px(LEGEND_MARGIN))
        .label_font(st.font(LEGEND_SIZE, TEXT))
        .background_style(WHITE.mix(0.88))
        .border_style(RGBColor(0xbb, 0xbb, 0xbb).stroke_width(st.upx(1.0)))
        .draw()
}

/// Stretches the axis by `factor` (in its own scale) at the top or the bottom.
fn stretch(axis: &mut Axis, factor: f64, upper: bool) {
    if upper {
        axis.hi = axis.at_unit(factor);
    } else {
        axis.lo = axis.at_unit(1.0 - factor);
    }
    axis.ticks = ticks(axis.lo, axis.hi, axis.scale);
}

/// Picks the legend corner, given its size as fractions of the plot: the one
/// that needs the least stretching of the y axis to leave the data uncovered.
/// Returns the corner, that stretch factor and whether it is at the top.
fn place_legend(
    p: &Panel,
    x: &Axis,
    y: &Axis,
    bars_axis: Option<&Axis>,
    bw: f64,
    bh: f64,
) -> (SeriesLabelPosition, f64, bool) {
    // Sample the data in plot fractions (0..1 both ways, y upwards).
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for line in &p.lines {
        for run in &line.runs {
            let unit: Vec<(f64, f64)> = run.iter().map(|&(a, b)| (x.to_unit(a), y.to_unit(b))).collect();
            pts.extend(unit.iter().copied());
            for w in unit.windows(2) {
                for k in 1..12 {
                    let t = f64::from(k) / 12.0;
                    pts.push((w[0].0 + t * (w[1].0 - w[0].0), w[0].1 + t * (w[1].1 - w[0].1)));
                }
            }
        }
    }
    for m in &p.markers {
        pts.push((x.to_unit(m.at.0), y.to_unit(m.at.1)));
    }
    if let (Some(b), Some(axis)) = (&p.bars, bars_axis) {
        for &(bx, v) in b.bars.iter().filter(|(_, v)| *v > 0.0) {
            let top = axis.to_unit(v);
            for k in 0..=8 {
                pts.push((x.to_unit(bx), top * f64::from(k) / 8.0));
            }
        }
    }
    let gap = 0.03;
    // Keep a unit axis in [0, 1] and a non-negative one above 0 if possible.
    let can_go_up = !p.unit;
    let can_go_down = !(y.scale == Scale::Linear && y.lo == 0.0);
    let candidates = [
        (SeriesLabelPosition::UpperRight, true, true),
        (SeriesLabelPosition::LowerRight, false, true),
        (SeriesLabelPosition::UpperLeft, true, false),
        (SeriesLabelPosition::LowerLeft, false, false),
    ];
    let mut choice = (SeriesLabelPosition::UpperRight, f64::INFINITY, true);
    let mut best_cost = f64::INFINITY;
    for (pos, upper, right) in candidates {
        let in_span = |px: f64| {
            if right {
                px >= 1.0 - bw - gap
            } else {
                px <= bw + gap
            }
        };
        let factor = if upper {
            let top = pts.iter().filter(|q| in_span(q.0)).map(|q| q.1).fold(f64::NEG_INFINITY, f64::max);
            (top / (1.0 - bh - gap)).max(1.0)
        } else {
            let bottom = pts.iter().filter(|q| in_span(q.0)).map(|q| q.1).fold(f64::INFINITY, f64::min);
            ((1.0 - bottom) / (1.0 - bh - gap)).max(1.0)
        };
        let allowed = if upper { can_go_up } else { can_go_down };
        let cost = if factor <= 1.0 {
            1.0
        } else if allowed {
            factor
        } else {
            factor + 10.0
        };
        if cost < best_cost - 1e-9 {
            best_cost = cost;
            choice = (pos, factor, upper);
        }
    }
    choice
}

// ---------------------------------------------------------------------------
// PNG output

/// Averages `f` x `f` blocks of an RGB image.
fn downsample(src: &[u8], w: usize, h: usize, f: usize) -> Vec<u8> {
    let (ow, oh) = (w / f, h / f);
    let mut out = vec![0u8; ow * oh * 3];
    let n = (f * f) as u32;
    for oy in 0..oh {
        for ox in 0..ow {
            for c in 0..3 {
                let mut sum = 0u32;
                for dy in 0..f {
                    let row = (oy * f + dy) * w;
                    for dx in 0..f {
                        sum += u32::from(src[(row + ox * f + dx) * 3 + c]);
                    }
                }
                out[(oy * ow + ox) * 3 + c] = ((sum + n / 2) / n) as u8;
            }
        }
    }
    out
}

/// Encodes an 8-bit RGB image as PNG (zlib through flate2, `Up` or `Sub`
/// filter per row, whichever looks smaller).
fn encode_png(rgb: &[u8], w: u32, h: u32) -> std::io::Result<Vec<u8>> {
    let stride = w as usize * 3;
    let mut raw = Vec::with_capacity((stride + 1) * h as usize);
    let mut prev = vec![0u8; stride];
    let mut sub = vec![0u8; stride];
    let mut up = vec![0u8; stride];
    for row in rgb.chunks_exact(stride) {
        for i in 0..stride {
            let left = if i >= 3 { row[i - 3] } else { 0 };
            sub[i] = row[i].wrapping_sub(left);
            up[i] = row[i].wrapping_sub(prev[i]);
        }
        let cost = |v: &[u8]| v.iter().map(|&b| u64::from((b as i8).unsigned_abs())).sum::<u64>();
        if cost(&up) <= cost(&sub) {
            raw.push(2);
            raw.extend_from_slice(&up);
        } else {
            raw.push(1);
            raw.extend_from_slice(&sub);
        }
        prev.copy_from_slice(row);
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
    z.write_all(&raw)?;
    let idat = z.finish()?;

    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8 bits, RGB, deflate, no interlace
    let mut out = Vec::with_capacity(idat.len() + 64);
    out.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(&mut out, b"IDAT", &idat);
    png_chunk(&mut out, b"IEND", &[]);
    Ok(out)
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("kynml-curves-{}-{name}", std::process::id()))
    }

    /// Checks a PNG: signature, chunk CRCs, IHDR, and that the image data
    /// inflates to exactly the expected number of bytes.
    fn check_png(bytes: &[u8]) -> (u32, u32) {
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG signature");
        let mut at = 8;
        let (mut w, mut h, mut idat, mut ended) = (0, 0, Vec::new(), false);
        while at + 12 <= bytes.len() {
            let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let kind = &bytes[at + 4..at + 8];
            let data = &bytes[at + 8..at + 8 + len];
            let crc = u32::from_be_bytes(bytes[at + 8 + len..at + 12 + len].try_into().unwrap());
            let mut c = flate2::Crc::new();
            c.update(kind);
            c.update(data);
            assert_eq!(c.sum(), crc, "CRC of {}", String::from_utf8_lossy(kind));
            match kind {
                b"IHDR" => {
                    w = u32::from_be_bytes(data[0..4].try_into().unwrap());
                    h = u32::from_be_bytes(data[4..8].try_into().unwrap());
                    assert_eq!(&data[8..], &[8, 2, 0, 0, 0]);
                }
                b"IDAT" => idat.extend_from_slice(data),
                b"IEND" => ended = true,
                _ => {}
            }
            at += 12 + len;
        }
        assert!(ended && at == bytes.len(), "IEND last");
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
        assert_eq!(raw.len(), (w as usize * 3 + 1) * h as usize);
        // Not a blank image: some pixels are dark (text, axes).
        assert!(raw.iter().filter(|&&b| b != 0 && b != 255).count() > 1000);
        (w, h)
    }

    fn check_svg(svg: &str) {
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<text"));
    }

    /// Draws both files through the public functions and checks them.
    fn draw_both(name: &str, c: &Curves) {
        let svg_path = temp_path(&format!("{name}.svg"));
        let png_path = temp_path(&format!("{name}.png"));
        draw_svg(c, &svg_path).unwrap();
        draw_png(c, &png_path).unwrap();
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        let png = std::fs::read(&png_path).unwrap();
        let _ = std::fs::remove_file(&svg_path);
        let _ = std::fs::remove_file(&png_path);
        check_svg(&svg);
        let (w, h) = check_png(&png);
        assert_eq!(w, 1600);
        assert!(h > 400);
    }

    struct History {
        epochs: Vec<usize>,
        train: Vec<f64>,
        val: Vec<f64>,
        lr: Vec<f64>,
        metrics: Vec<(String, Vec<f64>)>,
    }

    fn history(n: usize) -> History {
        let epochs: Vec<usize> = (1..=n).collect();
        let train: Vec<f64> = epochs.iter().map(|&e| 1.2 * (-(e as f64) / 6.0).exp() + 0.05).collect();
        let val: Vec<f64> = train.iter().map(|t| t * 1.1 + 0.15).collect();
        let lr = epochs.iter().map(|&e| 1e-3 * 0.9f64.powi(e as i32)).collect();
        let accuracy: Vec<f64> = val.iter().map(|v| (1.0 - v * 0.5).clamp(0.0, 1.0)).collect();
        let f1 = accuracy.iter().map(|a| a - 0.02).collect();
        let rmse = val.iter().map(|v| v.sqrt() * 3.0).collect();
        let metrics = vec![("accuracy".to_string(), accuracy), ("f1".to_string(), f1), ("rmse".to_string(), rmse)];
        History { epochs, train, val, lr, metrics }
    }

    fn curves<'a>(h: &'a History, title: &'a str) -> Curves<'a> {
        Curves {
            title,
            epochs: &h.epochs,
            train_loss: &h.train,
            val_loss: &h.val,
            lr: &h.lr,
            metrics: &h.metrics,
            loss_scale: None,
            skipped_steps: None,
            kept: None,
            ended: None,
        }
    }

    #[test]
    fn typical_history() {
        let h = history(30);
        draw_both("typical", &curves(&h, "DeepNet on LargeData (cpu)"));
    }

    #[test]
    fn single_epoch() {
        let h = history(1);
        draw_both("single", &curves(&h, "one epoch"));
    }

    #[test]
    fn nans_and_infinities_are_skipped() {
        let mut h = history(12);
        h.train[3] = f64::NAN;
        h.val[0] = f64::INFINITY;
        h.val[5] = f64::NAN;
        h.val[7] = f64::NEG_INFINITY;
        h.lr[2] = f64::NAN;
        h.metrics[0].1[4] = f64::NAN;
        h.metrics[2].1 = vec![f64::NAN; 12];
        draw_both("nans", &curves(&h, "with NaNs"));
        // Nothing finite at all, no validation, no metrics.
        let nan = [f64::NAN; 3];
        let c = Curves {
            title: "all NaN",
            epochs: &[1, 2, 3],
            train_loss: &nan,
            val_loss: &[],
            lr: &nan,
            metrics: &[],
            loss_scale: None,
            skipped_steps: None,
            kept: None,
            ended: None,
        };
        draw_both("all-nan", &c);
    }

    #[test]
    fn loss_scale_and_skipped_steps() {
        let h = history(40);
        let scale: Vec<f64> = (0..40).map(|e| 65536.0 / 2f64.powi((e / 7) % 4)).collect();
        let skipped: Vec<u64> = (0..40).map(|e| u64::from(e % 7 == 0)).collect();
        let mut c = curves(&h, "mixed precision (cuda, f16)");
        c.loss_scale = Some(&scale);
        c.skipped_steps = Some(&skipped);
        draw_both("loss-scale", &c);
        // Skipped steps alone.
        c.loss_scale = None;
        draw_both("skipped-only", &c);
    }

    #[test]
    fn empty_metrics_and_a_loss_over_decades() {
        let mut h = history(60);
        h.metrics.clear();
        for (i, t) in h.train.iter_mut().enumerate() {
            *t = 1e4 * 0.8f64.powi(i as i32);
        }
        let fig = Figure::new(&curves(&h, "log loss")).unwrap();
        assert_eq!(fig.panels.len(), 2);
        assert!(fig.panels[0].y.scale == Scale::Log10);
        draw_both("log-loss", &curves(&h, "log loss"));
    }

    #[test]
    fn odd_input_is_an_error_or_a_figure_never_a_panic() {
        let none = Curves {
            title: "nothing",
            epochs: &[],
            train_loss: &[],
            val_loss: &[],
            lr: &[],
            metrics: &[],
            loss_scale: None,
            skipped_steps: None,
            kept: None,
            ended: None,
        };
        assert!(matches!(render_svg(&none), Err(PlotError::NoEpochs)));
        assert!(matches!(render_png(&none), Err(PlotError::NoEpochs)));

        let metrics =
            vec![("<f1 & co>".to_string(), vec![f64::INFINITY, 0.5, 0.6]), ("r2".to_string(), vec![-1e9, -3.0])];
        let odd = Curves {
            title: "mismatched lengths, huge values",
            epochs: &[1, 2, 3, usize::MAX],
            train_loss: &[1e300, -1e300, f64::MAX, f64::MIN_POSITIVE, 7.0],
            val_loss: &[-5.0],
            lr: &[0.0, 0.0],
            metrics: &metrics,
            loss_scale: Some(&[0.0, -1.0, 1e30]),
            skipped_steps: Some(&[u64::MAX, u64::MAX]),
            kept: Some(usize::MAX),
            ended: None,
        };
        let svg = render_svg(&odd).unwrap();
        check_svg(&svg);
        assert!(svg.contains("&lt;f1 &amp; co&gt;"));
        check_png(&render_png(&odd).unwrap());
    }

    /// r2 far below 0 is drawn from -1 up where it later climbs there; where
    /// it never does, as it is (it was a flat line at -1, its trend hidden).
    #[test]
    fn a_score_far_below_zero_is_clipped_only_where_it_climbs_past_minus_one() {
        let panel = |r2: Vec<f64>| {
            let metrics = vec![("r2".to_string(), r2)];
            let c = Curves {
                title: "r2",
                epochs: &[1, 2, 3],
                train_loss: &[3.0, 2.0, 1.0],
                val_loss: &[3.0, 2.0, 1.0],
                lr: &[0.1, 0.1, 0.1],
                metrics: &metrics,
                loss_scale: None,
                skipped_steps: None,
                kept: None,
                ended: None,
            };
            let fig = Figure::new(&c).unwrap();
            let p = fig.panels.into_iter().find(|p| p.caption == "Validation r2").expect("an r2 panel");
            (p.y.lo, p.lines[0].label.clone())
        };
        let (lo, label) = panel(vec![-22.0, -0.5, 0.3]);
        assert!(lo == -1.0 && label.ends_with(", clipped at -1"), "{lo} {label}");
        let (lo, label) = panel(vec![-22.0, -21.5, -21.0]);
        assert!(lo <= -22.0 && !label.contains("clipped"), "{lo} {label}");
    }

    #[test]
    fn metrics_are_grouped_by_scale() {
        let h = history(10);
        let fig = Figure::new(&curves(&h, "groups")).unwrap();
        // Loss, scores (accuracy, f1), rmse, learning rate.
        let captions: Vec<&str> = fig.panels.iter().map(|p| p.caption.as_str()).collect();
        assert_eq!(captions, ["Loss", "Validation accuracy, f1", "Validation rmse", "Learning rate"]);
        assert!(fig.panels[1].y.lo >= 0.0 && fig.panels[1].y.hi <= 1.0);
    }

    /// The epoch the run kept is marked beside the lowest validation loss
    /// when they differ (a run without early stopping keeps its last; with
    /// `min_delta`, the best by that margin), and named in the subtitle.
    #[test]
    fn the_kept_epoch_is_marked_where_it_is_not_the_lowest_loss() {
        let h = history(30);
        let mut c = curves(&h, "kept");
        // The history's validation loss falls throughout: the lowest is the last epoch's.
        let lowest = h.val.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0 + 1;
        assert_eq!(lowest, 30);
        c.kept = Some(7);
        let fig = Figure::new(&c).unwrap();
        let labels: Vec<&str> = fig.panels[0].markers.iter().map(|m| m.label.as_str()).collect();
        assert!(labels[0].starts_with("best validation: ") && labels[0].ends_with("(epoch 30)"), "{labels:?}");
        assert!(labels[1].starts_with("model kept: ") && labels[1].ends_with("(epoch 7)"), "{labels:?}");
        assert_eq!(fig.panels[0].markers[1].at, (7.0, h.val[6]));
        assert!(fig.subtitle.contains("model kept: epoch 7"), "{}", fig.subtitle);
        draw_both("kept", &c);
        // Kept where the loss is lowest: one marker that says both.
        c.kept = Some(30);
        let fig = Figure::new(&c).unwrap();
        let labels: Vec<&str> = fig.panels[0].markers.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(labels.len(), 1, "{labels:?}");
        assert!(labels[0].starts_with("best validation, kept: "), "{labels:?}");
        assert!(!fig.subtitle.contains("model kept"), "{}", fig.subtitle);
        assert!(fig.subtitle.starts_with("30 epochs"), "{}", fig.subtitle);
        // Ended by early stopping: the chart says so, and of how many epochs.
        c.ended = Some(Ended::Early(80));
        let fig = Figure::new(&c).unwrap();
        assert!(fig.subtitle.starts_with("stopped early at epoch 30 of 80   ·   "), "{}", fig.subtitle);
        // Stopped by Ctrl-C, or by a loss that is not a number: said so.
        c.ended = Some(Ended::Interrupted(80));
        let fig = Figure::new(&c).unwrap();
        assert!(fig.subtitle.starts_with("interrupted after epoch 30 of 80   ·   "), "{}", fig.subtitle);
        c.ended = Some(Ended::NotFinite(80));
        let fig = Figure::new(&c).unwrap();
        assert!(
            fig.subtitle.starts_with("stopped after epoch 30 of 80: the loss was not a number"),
            "{}",
            fig.subtitle
        );
    }

    /// An error below 1 (mae) is not drawn as a score, and a metric that is
    /// NaN at every epoch (r2 on one validation row) is named, not dropped
    /// without a word.
    #[test]
    fn errors_are_not_scores_and_an_all_nan_metric_is_named() {
        let h = History {
            metrics: vec![("mae".to_string(), vec![0.5, 0.4, 0.3]), ("r2".to_string(), vec![f64::NAN; 3])],
            ..history(3)
        };
        let fig = Figure::new(&curves(&h, "errors")).unwrap();
        let mae = fig.panels.iter().find(|p| p.caption == "Validation mae").expect("a panel for mae");
        assert_eq!(mae.y_desc, "mae");
        assert!(fig.subtitle.contains("r2 not a number at any epoch"), "{}", fig.subtitle);
    }

    #[test]
    fn tick_labels() {
        assert_eq!(fmt_tick(0.30000000000000004, 0.1, 1.0), "0.3");
        assert_eq!(fmt_tick(0.25, 0.05, 1.0), "0.25");
        assert_eq!(fmt_tick(7.5, 2.5, 15.0), "7.5");
        assert_eq!(fmt_tick(1.2e-3, 1e-4, 1.3e-3), "1.2e-3");
        assert_eq!(fmt_tick(8e-4, 1e-4, 1.3e-3), "8e-4");
        assert_eq!(fmt_tick(-0.1773, 1e-4, 0.1774), "-0.1773");
        assert_eq!(fmt_tick(0.91235, 5e-5, 0.9124), "0.91235");
        assert_eq!(fmt_value(0.094_112), "0.09411");
        assert_eq!(fmt_value(3e-6), "3e-6");
        assert_eq!(ticks(0.5, 300.0, Scale::Log10), [1.0, 3.0, 10.0, 30.0, 100.0, 300.0]);
        assert_eq!(ticks(0.0, 1.0, Scale::Linear).len(), 6);
        let x = epoch_axis(&[1.0]);
        assert_eq!(x.ticks, [1.0]);
        assert_eq!(x.label(1.0), "1");
        assert_eq!(x.label(1.5), "");
    }
}
