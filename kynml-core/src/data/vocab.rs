//! Categorical columns: the values a column takes, learned from the
//! training rows, and the index each value stands for.
//!
//! A categorical cell is text (`red`, `Paris`, a postcode); the model sees
//! its index into the column's [`Vocabulary`], as a feature whose value is
//! that whole number. Index 0 is reserved for a value the training rows
//! never held: validation rows and rows given to `predict` may hold such
//! values, and they are mapped to 0 and counted rather than refused. Known
//! values take 1.., in sorted order, so the same training rows always give
//! the same indices.
//!
//! ```
//! # use kynml_core::data::Vocabulary;
//! let v = Vocabulary::fit("color", 2, ["red", "blue", "red"]);
//! assert_eq!(v.values, ["blue", "red"]);
//! assert_eq!((v.index("red"), v.index("green")), (Some(2), None));
//! assert_eq!(v.size(), 3); // the reserved index, then two values
//! ```

/// The values of one categorical column, as the training rows hold them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Vocabulary {
    /// The column's name in the header.
    pub column: String,
    /// Its position among the model's features (0-based).
    pub position: usize,
    /// Every distinct value of the training rows once, sorted byte by byte;
    /// value `values[i]` has index `i + 1`.
    pub values: Vec<String>,
    /// Validation rows whose value the training rows never held (mapped to
    /// [`UNSEEN`](Self::UNSEEN)).
    #[serde(default)]
    pub unseen_in_validation: usize,
}

/// The largest index a category or token may take: indices travel among a
/// row's features as 32-bit floats, which hold every whole number up to 2^24
/// and no longer every one past it.
pub const LARGEST_INDEX: usize = 1 << 24;

impl Vocabulary {
    /// The index of a value the training rows never held.
    pub const UNSEEN: u32 = 0;

    /// The vocabulary of `cells`, the column's training cells.
    pub fn fit<'a>(column: &str, position: usize, cells: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<String> = cells.into_iter().map(str::to_owned).collect();
        values.sort_unstable();
        values.dedup();
        Vocabulary { column: column.to_owned(), position, values, unseen_in_validation: 0 }
    }

    /// The index of `value`; `None` when the training rows never held it.
    pub fn index(&self, value: &str) -> Option<u32> {
        self.values.binary_search_by(|v| v.as_str().cmp(value)).ok().map(|i| i as u32 + 1)
    }

    /// The index of `value`, [`UNSEEN`](Self::UNSEEN) for a value the training rows never held.
    pub fn index_or_unseen(&self, value: &str) -> u32 {
        self.index(value).unwrap_or(Self::UNSEEN)
    }

    /// The number of indices: the values and the reserved one.
    pub fn size(&self) -> usize {
        self.values.len() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_sorted_values_after_the_reserved_one() {
        let v = Vocabulary::fit("city", 0, ["Paris", "Oslo", "Lima", "Oslo", ""]);
        assert_eq!(v.values, ["", "Lima", "Oslo", "Paris"]);
        assert_eq!(v.index(""), Some(1));
        assert_eq!(v.index("Paris"), Some(4));
        assert_eq!(v.index_or_unseen("Rome"), Vocabulary::UNSEEN);
        assert_eq!(v.size(), 5);
        // The order of the training rows does not matter.
        assert_eq!(Vocabulary::fit("city", 0, ["Lima", "Paris", "", "Oslo"]), v);
    }
}

/// The tokens of a text column, learned from the training rows: a text is
/// split at whitespace, each token becomes its index, and the sequence is cut
/// or padded to the model's length.
///
/// Index 0 is padding, 1 a token the training rows never held (or one past
/// the vocabulary's size limit); known tokens take 2.., the most frequent
/// first (ties in byte order).
///
/// ```
/// # use kynml_core::data::TokenVocabulary;
/// let v = TokenVocabulary::fit("review", 4, ["good film", "bad film", "film"], None);
/// assert_eq!(v.tokens, ["film", "bad", "good"]);
/// let mut ids = [0.0; 4];
/// assert_eq!(v.encode("good new film", &mut ids), 1); // one unseen token
/// assert_eq!(ids, [4.0, 1.0, 2.0, 0.0]);
/// ```
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TokenVocabulary {
    /// The text column's name.
    pub column: String,
    /// Tokens per text: longer texts are cut, shorter ones padded.
    pub length: usize,
    /// Known tokens; `tokens[i]` has index `i + 2`.
    pub tokens: Vec<String>,
    /// Tokens of the validation rows the training rows never held.
    #[serde(default)]
    pub unseen_in_validation: usize,
    /// The rows (training and validation) whose text held more than
    /// `length` tokens (their first ones are read), and the most a text
    /// held: said when the data is read, not saved with the model.
    #[serde(skip)]
    pub cut: (usize, usize),
    /// The rows whose text held no token (read as padding alone); not saved.
    #[serde(skip)]
    pub empty: usize,
}

/// Equal as vocabularies: the counts of the texts read (`cut`, `empty`),
/// which a saved model does not keep, are left out.
impl PartialEq for TokenVocabulary {
    fn eq(&self, other: &Self) -> bool {
        (&self.column, self.length, &self.tokens, self.unseen_in_validation)
            == (&other.column, other.length, &other.tokens, other.unseen_in_validation)
    }
}

impl Eq for TokenVocabulary {}

impl TokenVocabulary {
    /// The index of padding.
    pub const PAD: u32 = 0;
    /// The index of a token the vocabulary does not hold.
    pub const UNSEEN: u32 = 1;

    /// The vocabulary of `texts` (the training rows' cells), keeping the
    /// `limit` most frequent tokens when given.
    pub fn fit<'a>(
        column: &str,
        length: usize,
        texts: impl IntoIterator<Item = &'a str>,
        limit: Option<usize>,
    ) -> Self {
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for text in texts {
            for token in text.split_whitespace() {
                *counts.entry(token).or_default() += 1;
            }
        }
        let mut by_count: Vec<(&str, usize)> = counts.into_iter().collect();
        by_count.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        by_count.truncate(limit.unwrap_or(usize::MAX));
        let tokens = by_count.into_iter().map(|(t, _)| t.to_owned()).collect();
        TokenVocabulary { column: column.to_owned(), length, tokens, unseen_in_validation: 0, cut: (0, 0), empty: 0 }
    }

    /// The number of indices: padding, unseen, then the known tokens.
    pub fn size(&self) -> usize {
        self.tokens.len() + 2
    }

    /// Writes the indices of `text`'s first `out.len()` tokens into `out`,
    /// padding the rest; returns how many of them the vocabulary lacks.
    pub fn encode(&self, text: &str, out: &mut [f32]) -> usize {
        self.encode_with(&self.index(), text, out).unseen
    }

    /// The lookup table [`encode_with`](Self::encode_with) takes.
    pub fn index(&self) -> std::collections::HashMap<&str, u32> {
        self.tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32 + 2)).collect()
    }

    /// [`encode`](Self::encode) with a lookup table built once; also says
    /// how many tokens the text held (past `out.len()` too).
    pub fn encode_with(&self, index: &std::collections::HashMap<&str, u32>, text: &str, out: &mut [f32]) -> Encoded {
        out.fill(Self::PAD as f32);
        let (mut unseen, mut held) = (0, 0);
        for token in text.split_whitespace() {
            if let Some(slot) = out.get_mut(held) {
                let id = index.get(token).copied().unwrap_or(Self::UNSEEN);
                unseen += usize::from(id == Self::UNSEEN);
                *slot = id as f32;
            }
            held += 1;
        }
        Encoded { unseen, held }
    }
}

/// What [`TokenVocabulary::encode_with`] found in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    /// Tokens read (the first `length`) that the vocabulary lacks.
    pub unseen: usize,
    /// Tokens the text held, read or cut.
    pub held: usize,
}

impl Encoded {
    /// Adds this text to `cut` (texts longer than `length`, the most a text
    /// held) and `empty` (texts with no token).
    pub fn count(&self, length: usize, cut: &mut (usize, usize), empty: &mut usize) {
        *cut = (cut.0 + usize::from(self.held > length), cut.1.max(self.held));
        *empty += usize::from(self.held == 0);
    }
}

#[cfg(test)]
mod token_tests {
    use super::*;

    #[test]
    fn frequent_tokens_first_and_the_limit_keeps_the_most_frequent() {
        let texts = ["b a c", "a b", "a", "d"];
        let v = TokenVocabulary::fit("t", 3, texts, None);
        assert_eq!(v.tokens, ["a", "b", "c", "d"]);
        assert_eq!(v.size(), 6);
        let capped = TokenVocabulary::fit("t", 3, texts, Some(2));
        assert_eq!(capped.tokens, ["a", "b"]);
        let mut ids = [9.0; 3];
        // Cut at 3 tokens; `c` is past the limit, so unseen.
        assert_eq!(capped.encode("c  b\ta a", &mut ids), 1);
        assert_eq!(ids, [1.0, 3.0, 2.0]);
        assert_eq!(capped.encode("", &mut ids), 0);
        assert_eq!(ids, [0.0; 3]);
        // Every token is counted, those past the length too.
        let index = capped.index();
        assert_eq!(capped.encode_with(&index, "a b c d e", &mut ids), Encoded { unseen: 1, held: 5 });
        let (mut cut, mut empty) = ((0, 0), 0);
        for text in ["a b c d e", "a", "", "a b c"] {
            capped.encode_with(&index, text, &mut ids).count(3, &mut cut, &mut empty);
        }
        assert_eq!((cut, empty), ((1, 5), 1));
    }
}
