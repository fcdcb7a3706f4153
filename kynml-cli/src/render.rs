//! Tables and blocks for a person to read.

use std::collections::BTreeMap;

use kynml_core::model::ModelSummary;
use kynml_core::plan::Applied;
use kynml_core::train::memory::si;

/// Columns padded to their widest cell; numbers right-aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                // Padded by hand: a format width must fit in 16 bits, and a
                // cell (a model's name) may be longer (it panicked).
                let pad = " ".repeat(w.saturating_sub(c.chars().count()));
                if i > 0 && looks_numeric(c) {
                    format!("{pad}{c}")
                } else {
                    format!("{c}{pad}")
                }
            })
            .collect();
        format!("  {}", parts.join("   ").trim_end())
    };
    let mut out = vec![line(header.to_vec())];
    out.push(format!("  {}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("   ")));
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

/// Numbers (with a unit or a percent sign, and shapes) read best
/// right-aligned; words left-aligned.
fn looks_numeric(cell: &str) -> bool {
    let number = |s: &str| s.replace(',', "").parse::<f64>().is_ok();
    const UNITS: &[&str] = &["ms", "s", "B", "KiB", "MiB", "GiB", "TiB", "k", "M", "G", "T", "P"];
    cell.starts_with('[')
        // No value, in a column of numbers.
        || cell == "-"
        || number(cell)
        || cell.strip_suffix('%').is_some_and(number)
        // A duration as `duration` writes it: `16ms`, `1.83s`, `4m 05s`.
        || cell.strip_suffix("ms").or_else(|| cell.strip_suffix('s')).is_some_and(number)
        || cell.split_once("m ").is_some_and(|(m, s)| number(m) && s.strip_suffix('s').is_some_and(number))
        || cell.split_once(' ').is_some_and(|(n, unit)| {
            number(n) && (UNITS.contains(&unit) || unit.strip_suffix("FLOP/s").is_some_and(|p| p.len() <= 1))
        })
}

/// Seconds for a person: `0.8ms`, `42ms`, `0.42s`, `12.3s`, `4m 05s`, `1h 02m`.
pub fn duration(secs: f64) -> String {
    if secs < 0.01 {
        format!("{:.1}ms", secs * 1e3)
    } else if secs < 0.1 {
        format!("{:.0}ms", secs * 1e3)
    } else if secs < 10.0 {
        format!("{secs:.2}s")
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m {:02}s", (secs / 60.0) as u64, secs as u64 % 60)
    } else {
        format!("{}h {:02}m", (secs / 3600.0) as u64, (secs as u64 % 3600) / 60)
    }
}

pub fn model_table(summary: &ModelSummary) -> String {
    let shape = |s: &kynml_core::model::Shape| {
        let dims: Vec<String> = s.dims().iter().map(usize::to_string).collect();
        format!("[batch, {}]", dims.join(", "))
    };
    let input = format!("input {}", summary.input_shape);
    let mut rows = vec![vec![input, shape(&summary.input_shape), "0".to_string(), "0".to_string()]];
    for l in &summary.layers {
        rows.push(vec![l.layer.clone(), shape(&l.output_shape), thousands(l.params), si(l.multiply_adds as f64, "")]);
    }
    format!(
        "model {}\n{}\n  total trainable parameters: {}\n  multiply-adds of a sample's forward pass: {} (a training \
         step does about 3x: forward, then backward's two products per layer)",
        summary.name,
        table(&["layer", "output shape", "parameters", "multiply-adds"], &rows),
        thousands(summary.total_params),
        si(summary.multiply_adds as f64, ""),
    )
}

/// A profiled run's phases: total, mean, p50 and p95 per step, and share.
pub fn profile_table(profile: &kynml_core::train::profile::Profile) -> String {
    let ms = |s: f64| format!("{:.3} ms", s * 1e3);
    let rows: Vec<Vec<String>> = profile
        .summary()
        .iter()
        .map(|p| {
            vec![
                p.phase.to_string(),
                duration(p.total),
                ms(p.mean),
                ms(p.p50),
                ms(p.p95),
                format!("{:.1}%", 100.0 * p.share),
            ]
        })
        .collect();
    let how = if profile.synchronised {
        "each phase waited for the device, which slows the run"
    } else {
        "timed as they ran"
    };
    format!(
        "profile of {} ({how})\n{}{}",
        count(profile.steps.len(), "step"),
        table(&["phase", "total", "mean", "p50", "p95", "share"], &rows),
        profile.between_steps().map_or(String::new(), |b| format!("\n  {b}"))
    )
}

/// A loss or metric as printed: four decimals, or three significant
/// digits in exponent form below 0.001, where four decimals would show a
/// well-fitted model's loss on a small-unit target as 0.0000, and five from
/// a million up, where four decimals would print twenty digits of which
/// the float holds seven (a squared error of prices in cents).
pub fn number(v: f64) -> String {
    if v != 0.0 && v.abs() < 1e-3 {
        format!("{v:.3e}")
    } else if v.abs() >= 1e6 && v.is_finite() {
        format!("{v:.4e}")
    } else {
        format!("{v:.4}")
    }
}

/// Metrics in two columns; `on` names the rows they were measured on.
pub fn metrics_table(metrics: &BTreeMap<String, f64>, on: &str) -> String {
    let rows: Vec<Vec<String>> = metrics.iter().map(|(k, v)| vec![k.clone(), number(*v)]).collect();
    table(&["metric", on], &rows)
}

/// Classes listed one by one up to this many; beyond, the lowest-scoring.
const CLASSES_LISTED: usize = 40;
/// The confusion matrix is drawn up to this many classes and this width.
const CONFUSION_CLASSES: usize = 12;
const CONFUSION_WIDTH: usize = 120;

/// A class head's scores class by class, then its confusion matrix where it
/// fits a terminal; what does not fit is said, with where to find it.
pub fn class_breakdown(b: &kynml_core::predict::ClassBreakdown) -> String {
    let n = b.names.len();
    let row = |i: usize| {
        let s = &b.scores[i];
        // A class in neither the rows nor the predictions has no score (the
        // averages leave it out): `-`, not a 0 that reads as a failure.
        if !s.occurs() {
            return vec![shown(&b.names[i]), "-".into(), "-".into(), "-".into(), "0".into()];
        }
        vec![shown(&b.names[i]), number(s.precision), number(s.recall), number(s.f1), s.rows.to_string()]
    };
    let mut out = String::new();
    if n <= CLASSES_LISTED {
        let rows: Vec<Vec<String>> = (0..n).map(row).collect();
        out.push_str(&table(&["class", "precision", "recall", "f1", "rows"], &rows));
    } else {
        // The classes that need attention: lowest F1 first, among those the rows hold.
        let mut worst: Vec<usize> = (0..n).filter(|&i| b.scores[i].rows > 0).collect();
        worst.sort_by(|&x, &y| b.scores[x].f1.total_cmp(&b.scores[y].f1).then(x.cmp(&y)));
        worst.truncate(10);
        let rows: Vec<Vec<String>> = worst.iter().map(|&i| row(i)).collect();
        out.push_str(&format!("{n} classes; the {} with the lowest f1 (every class: --json FILE)\n", rows.len()));
        out.push_str(&table(&["class", "precision", "recall", "f1", "rows"], &rows));
    }
    out.push_str("\n\n");
    let Some(confusion) = &b.confusion else {
        out.push_str(&format!(
            "confusion matrix: not made for more than {} classes ({n})",
            thousands(kynml_core::predict::CONFUSION_MAX_CLASSES)
        ));
        return out;
    };
    // Column headers cut to share what the row labels leave of the width.
    let label = b.names.iter().map(|c| shown(c).chars().count()).max().unwrap_or(0).max(16);
    let cut = (CONFUSION_WIDTH.saturating_sub(2 + label) / n.max(1)).saturating_sub(3).clamp(4, 12);
    let header: Vec<String> =
        std::iter::once("true \\ predicted".to_string()).chain(b.names.iter().map(|c| short(&shown(c), cut))).collect();
    let rows: Vec<Vec<String>> = confusion
        .iter()
        .enumerate()
        .map(|(t, counts)| std::iter::once(shown(&b.names[t])).chain(counts.iter().map(u64::to_string)).collect())
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let drawn = table(&header, &rows);
    if n <= CONFUSION_CLASSES && drawn.lines().all(|l| l.chars().count() <= CONFUSION_WIDTH) {
        out.push_str("confusion matrix: rows are the true classes, columns the predicted ones\n");
        out.push_str(&drawn);
    } else {
        out.push_str(&format!("confusion matrix: {n} × {n}, too wide to draw here (it is in --json FILE)"));
    }
    out
}

/// `text` cut to `max` characters, an ellipsis marking the cut.
fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        text.chars().take(max - 1).chain(std::iter::once('…')).collect()
    }
}

/// The "what runs" block: every setting as it will really apply. Settings
/// that will not apply as the spec asks are marked with `!`.
pub fn what_runs(applied: &[Applied]) -> String {
    let width = applied.iter().map(|a| a.setting.len()).max().unwrap_or(0);
    let mut out = String::from("what runs:\n");
    for a in applied {
        let mark = if a.as_requested { ' ' } else { '!' };
        out.push_str(&format!("  {mark} {:<width$}  {}\n", a.setting, a.value));
    }
    out.trim_end().to_string()
}

pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The run's memory estimate, in one line: `memory: about 1.2 GiB (...)`.
pub fn memory(e: &kynml_core::train::memory::MemoryEstimate, device: &kynml_backend::Device) -> String {
    use kynml_core::train::memory::bytes;
    let of = match device.memory_capacity() {
        Some(c) if matches!(device.kind, kynml_backend::DeviceKind::Cpu { .. }) => {
            format!(" of {} available", bytes(c))
        }
        Some(c) => format!(" of {}", bytes(c)),
        None => String::new(),
    };
    memory_line(e, &of)
}

/// The memory estimate's line, `of` said after the total (`" of 80.0 GiB"`).
pub fn memory_line(e: &kynml_core::train::memory::MemoryEstimate, of: &str) -> String {
    format!("memory: about {}{of} ({})", kynml_core::train::memory::bytes(e.total()), e.breakdown())
}

/// What the data's categorical columns and text hold, one line each
/// (`categorical: city (8 values), ...`, `text: ...`); none for plain numbers.
pub fn vocabularies(info: &kynml_core::data::DataInfo) -> Vec<String> {
    let mut out = Vec::new();
    if !info.categories.is_empty() {
        let each: Vec<String> = (info.categories.iter())
            .map(|v| match v.unseen_in_validation {
                0 => format!("{} ({})", v.column, count(v.values.len(), "value")),
                n => {
                    format!(
                        "{} ({}; {} one training never saw)",
                        v.column,
                        count(v.values.len(), "value"),
                        count_holding(n).replacen(" row", " validation row", 1)
                    )
                }
            })
            .collect();
        out.push(format!("categorical: {}", each.join(", ")));
    }
    if let Some(t) = &info.tokens {
        let unseen = match t.unseen_in_validation {
            0 => String::new(),
            1 => "; 1 validation token is not in it".to_string(),
            n => format!("; {n} validation tokens are not in it"),
        };
        let cut = match t.cut {
            (0, longest) => format!("; the longest holds {}", count(longest, "token")),
            (1, longest) => format!("; 1 row was longer and cut (it held {longest})"),
            (n, longest) => format!("; {n} rows were longer and cut (the longest held {longest})"),
        };
        let empty = match t.empty {
            0 => String::new(),
            n => format!("; {} no token (all padding)", count_holding(n)),
        };
        out.push(format!(
            "text: `{}`, {} per row, a vocabulary of {}{unseen}{cut}{empty}",
            t.column,
            count(t.length, "token"),
            count(t.tokens.len(), "token")
        ));
    }
    if let Some(s) = &info.sequence {
        let mut cut = match s.cut {
            0 => format!("; the longest holds {}", s.longest),
            n => format!("; {n} rows were longer and cut (the longest held {})", s.longest),
        };
        // Read as all padding: such a row trains on its target alone.
        if s.empty > 0 {
            cut += &format!("; {} no values (all padding)", count_holding(s.empty));
        }
        out.push(format!(
            "sequence: `{}`, {} of {} value{} per row, shorter rows padded{cut}",
            s.columns.join("`, `"),
            count(s.length, "position"),
            s.channels(),
            if s.channels() == 1 { "" } else { "s" }
        ));
    }
    // Category and token indices are left as they are: with no other column,
    // `normalize = true` has nothing to standardize (said, not silently
    // dropped).
    // Told from the columns' kinds, not the statistics (a constant numeric
    // column is standardized to std 1 as well).
    let only_indices =
        info.tokens.is_some() || (!info.categories.is_empty() && info.categories.len() == info.feature_names.len());
    if only_indices && info.normalizer.is_some() {
        out.push(
            "note: normalize = true changes nothing here: every input is a category index or a text's token id, \
             which are names, not quantities, and are left as they are"
                .into(),
        );
    }
    out
}

/// `1 row holds`, `3 rows hold`.
pub fn count_holding(n: usize) -> String {
    format!("{} {}", count(n, "row"), if n == 1 { "holds" } else { "hold" })
}

/// `n` things, in the singular for one: `1 row`, `3 rows`.
pub fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// What a row of `data` gives the model, in words: `4 features`, or for a
/// text its token count, for a sequence its values.
pub fn inputs(data: &kynml_core::data::Dataset) -> String {
    if let Some(t) = &data.info.tokens {
        format!("a text of {} a row", count(t.length, "token"))
    } else if data.info.sequence.is_some() {
        format!("{} a row (a sequence)", count(data.n_features(), "value"))
    } else {
        count(data.n_features(), "feature")
    }
}

/// A value from the user's data (a class name) as a terminal shows it
/// safely: control characters (an escape sequence that would clear the
/// screen, a newline inside a label) and the marks that reorder or break
/// the text around them (bidirectional overrides, line and paragraph
/// separators) written as escapes.
pub fn shown(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    text.chars().map(|c| if hidden(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A label holding a terminal escape or a line break is printed as
    /// escapes; other text, accents and all, as it is.
    #[test]
    fn data_values_show_their_control_characters_as_escapes() {
        assert_eq!(shown("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(shown("two\nlines\t"), "two\\u{a}lines\\u{9}");
        assert_eq!(shown("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(shown("café, 猫"), "café, 猫");
    }

    fn breakdown(names: Vec<String>, pred: &[u32], target: &[u32]) -> kynml_core::predict::ClassBreakdown {
        kynml_core::predict::ClassBreakdown::new(names, pred, target)
    }

    /// A few classes: every class's row and the matrix drawn, a long name
    /// cut in the matrix's header (whole in its rows), an escape shown as such.
    #[test]
    fn a_few_classes_get_their_scores_and_the_matrix() {
        let long = "a class name far too long for a column".to_string();
        let names = vec!["cat".to_string(), long.clone(), "\u{1b}[2J".to_string()];
        let said = class_breakdown(&breakdown(names, &[0, 1, 1, 2, 0], &[0, 1, 2, 2, 1]));
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["class", "precision", "recall", "f1", "rows"]);
        // cat: tp 1, fp 1 (row 4), fn 0.
        assert!(lines[2].starts_with("  cat") && lines[2].ends_with("0.5000   1.0000   0.6667      1"), "{said}");
        assert!(said.contains(&format!("  {long}")) && said.contains("a class nam…   "), "{said}");
        assert!(!said.contains('\u{1b}') && said.contains("\\u{1b}[2J"), "{said}");
        assert!(said.contains("confusion matrix: rows are the true classes, columns the predicted ones"), "{said}");
        let cat_row = said.lines().rev().find(|l| l.trim_start().starts_with("cat")).unwrap();
        assert_eq!(cat_row.split_whitespace().collect::<Vec<_>>(), ["cat", "1", "0", "0"], "{said}");
        // A class neither in the rows nor predicted has no score: `-`.
        let said = class_breakdown(&breakdown(vec!["a".into(), "b".into(), "c".into()], &[0, 1], &[0, 0]));
        let c = said.lines().nth(4).unwrap();
        assert!(c.contains("      -        -        -      0"), "right-aligned as the numbers: {said}");
        assert_eq!(c.split_whitespace().collect::<Vec<_>>(), ["c", "-", "-", "-", "0"], "{said}");
        let b = said.lines().nth(3).unwrap();
        assert_eq!(b.split_whitespace().collect::<Vec<_>>(), ["b", "0.0000", "0.0000", "0.0000", "0"], "{said}");
    }

    /// Many classes: the ten lowest F1s among the classes present, and the
    /// matrix left to --json rather than drawn past any terminal's width.
    #[test]
    fn many_classes_list_the_lowest_and_leave_the_matrix_to_json() {
        let n = 50;
        let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        // Every class right, except classes 5..20, each mistaken for the next once in two rows.
        let mut pred = Vec::new();
        let mut target = Vec::new();
        for c in 0..n as u32 {
            target.extend([c, c]);
            pred.extend(if (5..20).contains(&c) { [c, c + 1] } else { [c, c] });
        }
        let said = class_breakdown(&breakdown(names, &pred, &target));
        assert!(said.starts_with("50 classes; the 10 with the lowest f1 (every class: --json FILE)"), "{said}");
        let listed: Vec<&str> = said.lines().skip(3).take(10).map(|l| l.split_whitespace().next().unwrap()).collect();
        // Class 5 has no row predicted as it wrongly (f1 2/3); 6..=19 lost one and gained one (f1 1/2).
        assert_eq!(listed, ["c6", "c7", "c8", "c9", "c10", "c11", "c12", "c13", "c14", "c15"], "{said}");
        assert!(said.ends_with("confusion matrix: 50 × 50, too wide to draw here (it is in --json FILE)"), "{said}");
        // Past the limit of a matrix's classes, none is made: said.
        let n = kynml_core::predict::CONFUSION_MAX_CLASSES + 1;
        let said = class_breakdown(&breakdown((0..n).map(|i| format!("c{i}")).collect(), &[0, 1], &[0, 1]));
        assert!(said.ends_with("confusion matrix: not made for more than 1,000 classes (1001)"), "{said}");
    }

    /// A loss of 8.25e-5 (a target in small units) is not printed as
    /// 0.0000; ordinary values keep four decimals.
    #[test]
    fn small_losses_keep_their_digits() {
        assert_eq!(number(8.25e-5), "8.250e-5");
        assert_eq!(number(-4.2e-7), "-4.200e-7");
        assert_eq!(number(0.0012), "0.0012");
        assert_eq!(number(0.0), "0.0000");
        assert_eq!(number(12345.678), "12345.6780");
        assert_eq!(number(f64::NAN), "NaN");
        // From a million up, five significant digits rather than twenty.
        assert_eq!(number(3_036_553_684_331.487), "3.0366e12");
        assert_eq!(number(-1.4e50), "-1.4000e50");
        assert_eq!(number(999_999.5), "999999.5000");
        assert_eq!(number(f64::INFINITY), "inf");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(215_425), "215,425");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(0), "0");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(0.00081), "0.8ms");
        assert_eq!(duration(0.0423), "42ms");
        assert_eq!(duration(0.4234), "0.42s");
        assert_eq!(duration(12.34), "12.3s");
        assert_eq!(duration(245.0), "4m 05s");
        assert_eq!(duration(3720.0), "1h 02m");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&["a", "bb"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "  a     bb\n  ---   --\n  xyz    1");
        for cell in ["16ms", "1.83s", "4m 05s", "128 GFLOP/s", "203 M", "12.5 MiB", "41%"] {
            assert!(looks_numeric(cell), "{cell}");
        }
        for cell in ["relu", "ms", "1 box", "4m apart"] {
            assert!(!looks_numeric(cell), "{cell}");
        }
        // A cell wider than a format width can be (u16): padded all the same.
        let long = "M".repeat(70_000);
        let t = table(&["run", "epochs"], &[vec![long.clone(), "3".into()], vec!["b".into(), "12".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2] == format!("  {long}{}3", " ".repeat(8)), "{:?}", &lines[2][70_000..]);
        assert!(lines[3] == format!("  b{}12", " ".repeat(70_006)), "{}", lines[3].len());
    }
}
