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
