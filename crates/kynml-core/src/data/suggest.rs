//! "Did you mean ...?" for a column name that is not in the file.

/// The candidate closest to `wanted`, if it is close enough to be a typo:
/// a difference in case only, or an edit distance of at most a third of the
/// name's length (at least 1) that leaves some of the name standing, so that
/// `x` does not suggest `y`. Ties go to the earlier candidate.
pub(crate) fn closest<'a>(wanted: &str, candidates: &'a [String]) -> Option<&'a str> {
    let wanted_lower = wanted.to_lowercase();
    let len = wanted.chars().count();
    let limit = (len / 3).max(1);
    candidates
        .iter()
        .map(|c| (edit_distance(&wanted_lower, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit && (*d == 0 || *d < len))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.as_str())
}

/// Levenshtein distance over chars, with one row of memory.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("specie", "species"), 1);
        assert_eq!(edit_distance("flaw", "lawn"), 2);
    }

    #[test]
    fn suggests_typos_and_case_slips_only() {
        let cols = names(&["sepal_length", "species", "petal_width"]);
        assert_eq!(closest("specie", &cols), Some("species"));
        assert_eq!(closest("Species", &cols), Some("species"));
        assert_eq!(closest("petal_widht", &cols), Some("petal_width"));
        assert_eq!(closest("outcome", &cols), None);
        assert_eq!(closest("x", &names(&["y"])), None);
        assert_eq!(closest("X", &names(&["y", "x"])), Some("x"));
        assert_eq!(closest("ag", &names(&["age"])), Some("age"));
    }
}
