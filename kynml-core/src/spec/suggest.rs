//! "Did you mean ...?" for misspelled keys, values, block kinds and names.

/// Names users bring from other tools, mapped to what this language calls
/// them. Edit distance cannot find these (`learning_rate` is far from `lr`),
/// and for a few it would find the wrong thing (`gpu` is one letter from
/// `cpu`).
const ALIASES: &[(&str, &str)] = &[
    ("learning_rate", "lr"),
    ("batch_size", "batch"),
    ("num_epochs", "epochs"),
    ("n_epochs", "epochs"),
    ("max_epochs", "epochs"),
    ("optim", "optimizer"),
    ("lr_scheduler", "scheduler"),
    ("early_stopping", "early_stop"),
    ("dataset", "data"),
    ("float32", "fp32"),
    ("f32", "fp32"),
    ("float16", "fp16"),
    ("f16", "fp16"),
    ("half", "fp16"),
    ("bfloat16", "bf16"),
    ("gpu", "cuda"),
    ("vulkan", "wgpu"),
    ("metal", "wgpu"),
    ("mps", "wgpu"),
    ("l2", "mse"),
    ("l1", "mae"),
    ("mean_squared_error", "mse"),
    ("mean_absolute_error", "mae"),
    ("smooth_l1", "huber"),
    ("bce_with_logits", "bce"),
    ("binary_cross_entropy", "bce"),
    ("linear", "dense"),
    ("fc", "dense"),
    ("swish", "silu"),
    ("lrelu", "leaky_relu"),
    ("momentum_sgd", "sgd"),
    ("cosine_annealing", "cosine"),
    ("steplr", "step"),
    ("weight_decay_rate", "weight_decay"),
    ("beta", "betas"),
    ("ce", "cross_entropy"),
    ("xent", "cross_entropy"),
    ("nll", "cross_entropy"),
    ("acc", "accuracy"),
    ("wait", "patience"),
    ("every", "every_n"),
    ("file", "path"),
    ("filename", "path"),
    ("filepath", "path"),
];

/// Whether `c` shows as nothing, or as a space it is not: control and
/// format characters (zero-width spaces and joiners, the byte-order mark,
/// direction marks, the soft hyphen) and spaces other than ` `.
pub(crate) fn invisible(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(c, '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}' | '\u{feff}')
}

/// `name` as a message shows it: a character no one sees escaped
/// (`y\u{200b}`), so that two names that look alike are told apart.
pub(crate) fn visible(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(invisible) {
        return std::borrow::Cow::Borrowed(name);
    }
    name.chars().map(|c| if invisible(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Longest word for which a suggestion is searched; edit distance is
/// quadratic and a typo is never that long.
const MAX_WORD: usize = 64;

/// The candidate that `word` most likely was meant to be, if any is close:
/// a known alias first, then a match ignoring case, then the nearest by edit
/// distance within about a third of the word's length (rustc's rule).
pub(crate) fn did_you_mean<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let candidates: Vec<&'a str> = candidates.into_iter().collect();
    let lower = word.to_ascii_lowercase();
    if let Some((_, target)) = ALIASES.iter().find(|(alias, _)| *alias == lower) {
        if let Some(found) = candidates.iter().find(|c| *c == target) {
            return Some(found);
        }
    }
    if let Some(found) = candidates.iter().find(|c| c.eq_ignore_ascii_case(word)) {
        return Some(found);
    }
    // The name with a character no one sees (`y` + a zero-width space, a
    // spreadsheet's stray byte-order mark): shown with it escaped, by `visible`.
    let seen = |c: &str| c.chars().filter(|&ch| !invisible(ch)).collect::<String>();
    if let Some(found) = candidates.iter().find(|c| c.chars().any(invisible) && seen(c).eq_ignore_ascii_case(word)) {
        return Some(found);
    }
    let word_len = word.chars().count();
    if word_len == 0 || word_len > MAX_WORD {
        return None;
    }
    let limit = word_len.max(3) / 3;
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let len = candidate.chars().count();
        if len > MAX_WORD || len.abs_diff(word_len) > limit {
            continue;
        }
        let d = distance(&lower, &candidate.to_ascii_lowercase());
        // A one-letter word is one edit from every one-letter name: a
        // suggestion must keep something of the word.
        if d <= limit && d < word_len && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// [`did_you_mean`] for the language's own words, and failing that the
/// one name that `word` starts (`prec` for `precision`, of at least three
/// letters). Not for a data file's column names, where the start of a
/// name (`age` of `age;income`, `price` of `price_per_m2`) is no typo.
pub(crate) fn spec_word<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let candidates: Vec<&'a str> = candidates.into_iter().collect();
    did_you_mean(word, candidates.iter().copied()).or_else(|| {
        let lower = word.to_ascii_lowercase();
        let mut starting =
            candidates.iter().filter(|c| word.chars().count() >= 3 && c.to_ascii_lowercase().starts_with(&lower));
        match (starting.next(), starting.next()) {
            (Some(only), None) => Some(*only),
            _ => None,
        }
    })
}

/// Activations and optimizers of other tools that are not these names'
/// typos but other things (ELU is not ReLU, Adamax not AdamW), one or two
/// edits from a name here: "did you mean" would mislead, so the caller
/// lists what is accepted instead.
const OTHER_THINGS: &[&str] = &[
    "elu", "selu", "celu", "mish", "softplus", "softsign", "prelu", "rrelu", "adamax", "nadam", "radam", "adagrad",
    "adadelta", "lamb", "lion", "lars",
];

/// `did you mean `x`?`, or `None` (also for another tool's name of a
/// different thing, [`OTHER_THINGS`]).
pub(crate) fn help<'a, I>(word: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    if OTHER_THINGS.contains(&word.to_ascii_lowercase().as_str()) {
        return None;
    }
    spec_word(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// `` `a`, `b` or `c` `` for help lines that list what is accepted.
pub(crate) fn one_of(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| format!("`{o}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Optimal string alignment distance: edits are insertions, deletions,
/// substitutions and swaps of two neighbours (`trian` is one edit from
/// `train`).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best =
                (d[(i - 1) * width + j] + 1).min(d[i * width + j - 1] + 1).min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {

    /// A name holding a character no one sees is suggested for the name
    /// without it, and shown with it escaped.
    #[test]
    fn an_invisible_character_is_found_and_shown() {
        let names = ["a", "b", "y\u{200b}"];
        assert_eq!(did_you_mean("y", names), Some("y\u{200b}"));
        assert_eq!(visible("y\u{200b}"), "y\\u{200b}");
        assert_eq!(visible("\u{feff}price"), "\\u{feff}price");
        assert_eq!(visible("plain name"), "plain name");
        assert_eq!(visible("café"), "café");
        assert_eq!(did_you_mean("y", ["a", "b"]), None);
    }

    use super::*;

    #[test]
    fn finds_typos() {
        assert_eq!(did_you_mean("epoch", ["epochs", "batch"]), Some("epochs"));
        assert_eq!(did_you_mean("trian", ["train", "model"]), Some("train"));
        assert_eq!(did_you_mean("DeepNt", ["DeepNet"]), Some("DeepNet"));
        assert_eq!(did_you_mean("Train", ["train"]), Some("train"));
        assert_eq!(did_you_mean("mze", ["mse", "mae"]), Some("mse"));
        assert_eq!(did_you_mean("optimiser", ["optimizer"]), Some("optimizer"));
    }

    #[test]
    fn rejects_far_words() {
        assert_eq!(did_you_mean("banana", ["epochs", "batch"]), None);
        assert_eq!(did_you_mean("", ["a"]), None);
        assert_eq!(did_you_mean(&"x".repeat(1000), ["x"]), None);
    }

    #[test]
    fn aliases_win_over_distance() {
        assert_eq!(did_you_mean("gpu", ["auto", "cpu", "cuda", "wgpu"]), Some("cuda"));
        assert_eq!(did_you_mean("learning_rate", ["lr", "eps"]), Some("lr"));
        // An alias whose target is not on offer falls back to distance.
        assert_eq!(did_you_mean("gpu", ["cpu"]), Some("cpu"));
    }

    #[test]
    fn other_tools_names_of_other_things_are_not_typos() {
        assert_eq!(help("elu", ["relu", "gelu", "silu"]), None);
        assert_eq!(help("Adamax", ["adam", "adamw", "sgd"]), None);
        assert_eq!(help("rleu", ["relu", "gelu"]).as_deref(), Some("did you mean `relu`?"));
    }

    #[test]
    fn distance_counts_swaps_once() {
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn one_of_reads_as_a_sentence() {
        assert_eq!(one_of(&["a"]), "`a`");
        assert_eq!(one_of(&["a", "b", "c"]), "`a`, `b` or `c`");
    }
}
