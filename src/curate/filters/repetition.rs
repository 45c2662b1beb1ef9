//! `repetition`: Gopher-style repetition rules on one scope's text (lines, paragraphs, n-grams).

use super::{Filter, FilterProblem, Judge, JudgeText};
use crate::curate::text::{RowText, Scope};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Gopher-style repetition rules (Rae et al. 2021, table A1; thresholds as in datatrove's
/// `GopherRepetitionFilter`). A row is dropped when any fraction exceeds its maximum; `null`
/// turns a rule off. Lines are compared trimmed, and lines without a letter or digit (blank
/// lines, lone braces) are not counted; paragraphs are separated by blank lines; n-grams are of
/// normalized words ([`normalize`](crate::curate::text::normalize)) and character fractions count word characters.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Repetition {
    #[serde(default)]
    pub name: Option<String>,
    /// Default `assistant`: the model learns to produce what the answers contain.
    #[serde(default = "assistant_scope")]
    pub scope: Scope,
    /// Lines that repeat an earlier line, over all lines.
    #[serde(default = "some_0_3")]
    pub max_duplicate_line_fraction: Option<f64>,
    /// Characters in repeated lines, over all line characters.
    #[serde(default = "some_0_2")]
    pub max_duplicate_line_char_fraction: Option<f64>,
    #[serde(default = "some_0_3")]
    pub max_duplicate_paragraph_fraction: Option<f64>,
    #[serde(default = "some_0_2")]
    pub max_duplicate_paragraph_char_fraction: Option<f64>,
    /// n → maximum share of characters in the most frequent n-gram (counted when it occurs
    /// more than once; ties: the longest). Giving the map replaces all of it.
    #[serde(default = "default_top_ngrams")]
    pub max_top_ngram_char_fraction: BTreeMap<usize, f64>,
    /// n → maximum share of characters in n-grams that repeat an earlier n-gram (scanned left
    /// to right, a repeat skipping its n words, as datatrove does).
    #[serde(default = "default_duplicate_ngrams")]
    pub max_duplicate_ngram_char_fraction: BTreeMap<usize, f64>,
}

impl Default for Repetition {
    fn default() -> Self {
        Repetition {
            name: None,
            scope: Scope::Assistant,
            max_duplicate_line_fraction: Some(0.3),
            max_duplicate_line_char_fraction: Some(0.2),
            max_duplicate_paragraph_fraction: Some(0.3),
            max_duplicate_paragraph_char_fraction: Some(0.2),
            max_top_ngram_char_fraction: default_top_ngrams(),
            max_duplicate_ngram_char_fraction: default_duplicate_ngrams(),
        }
    }
}

fn assistant_scope() -> Scope {
    Scope::Assistant
}
fn some_0_3() -> Option<f64> {
    Some(0.3)
}
fn some_0_2() -> Option<f64> {
    Some(0.2)
}
fn default_top_ngrams() -> BTreeMap<usize, f64> {
    [(2, 0.2), (3, 0.18), (4, 0.16)].into_iter().collect()
}
fn default_duplicate_ngrams() -> BTreeMap<usize, f64> {
    [
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    ]
    .into_iter()
    .collect()
}

impl Filter for Repetition {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        let r = self;
        let all = [
            ("max_duplicate_line_fraction", r.max_duplicate_line_fraction),
            (
                "max_duplicate_line_char_fraction",
                r.max_duplicate_line_char_fraction,
            ),
            (
                "max_duplicate_paragraph_fraction",
                r.max_duplicate_paragraph_fraction,
            ),
            (
                "max_duplicate_paragraph_char_fraction",
                r.max_duplicate_paragraph_char_fraction,
            ),
        ];
        for (field, value) in all {
            if let Some(v) = value.filter(|v| !(0.0..=1.0).contains(v)) {
                return Err(FilterProblem::Fraction { field, value: v });
            }
        }
        for (field, map) in [
            (
                "max_top_ngram_char_fraction",
                &r.max_top_ngram_char_fraction,
            ),
            (
                "max_duplicate_ngram_char_fraction",
                &r.max_duplicate_ngram_char_fraction,
            ),
        ] {
            for (&n, &v) in map {
                if !(1..=64).contains(&n) {
                    return Err(FilterProblem::NgramSize { field, n });
                }
                if !(0.0..=1.0).contains(&v) {
                    return Err(FilterProblem::NgramFraction { field, n, value: v });
                }
            }
        }
        Ok(Judge::Text(Box::new(r.clone())))
    }
}

impl JudgeText for Repetition {
    fn judge(&self, row: &RowText) -> Option<String> {
        repetition(self, row.scope(self.scope), || row.normalized(self.scope))
    }

    /// The first line, else paragraph, seen twice: what repeats.
    fn evidence(&self, row: &RowText) -> Option<String> {
        let text = row.scope(self.scope);
        let mut seen = HashSet::new();
        let line = lines(text)
            .map(str::trim)
            .filter(|l| has_alphanumeric(l))
            .find(|l| !seen.insert(*l));
        let repeated = line.map(str::to_owned).or_else(|| {
            let mut seen = HashSet::new();
            paragraphs(text)
                .into_iter()
                .find(|p| !seen.insert(p.clone()))
                .map(|p| p.into_owned())
        });
        Some(super::head(repeated.as_deref().unwrap_or(text)))
    }
}

/// The first repetition rule `text` breaks; `normalized` gives its [`normalize`](crate::curate::text::normalize)d form
/// (computed only if the n-gram rules are reached, and shared with other steps of the scope).
fn repetition<'t>(
    r: &Repetition,
    text: &str,
    normalized: impl FnOnce() -> &'t str,
) -> Option<String> {
    let lines: Vec<&str> = lines(text).filter(|l| has_alphanumeric(l)).collect();
    repetition_rules(r, text, &lines, normalized)
}

fn repetition_rules<'t>(
    r: &Repetition,
    text: &str,
    lines: &[&str],
    normalized: impl FnOnce() -> &'t str,
) -> Option<String> {
    let over = |what: &str, value: f64, max: Option<f64>| -> Option<String> {
        max.filter(|&max| value > max)
            .map(|max| format!("{what} {value:.3} > {max}"))
    };
    if !lines.is_empty() {
        let (dup, dup_chars, chars) = duplicates(lines);
        if let Some(d) = over(
            "duplicate line fraction",
            dup as f64 / lines.len() as f64,
            r.max_duplicate_line_fraction,
        ) {
            return Some(d);
        }
        if let Some(d) = over(
            "duplicate line character fraction",
            dup_chars as f64 / chars.max(1) as f64,
            r.max_duplicate_line_char_fraction,
        ) {
            return Some(d);
        }
    }
    let paragraphs = paragraphs(text);
    if !paragraphs.is_empty() {
        let refs: Vec<&str> = paragraphs.iter().map(|p| &**p).collect();
        let (dup, dup_chars, chars) = duplicates(&refs);
        if let Some(d) = over(
            "duplicate paragraph fraction",
            dup as f64 / refs.len() as f64,
            r.max_duplicate_paragraph_fraction,
        ) {
            return Some(d);
        }
        if let Some(d) = over(
            "duplicate paragraph character fraction",
            dup_chars as f64 / chars.max(1) as f64,
            r.max_duplicate_paragraph_char_fraction,
        ) {
            return Some(d);
        }
    }
    if r.max_top_ngram_char_fraction.is_empty() && r.max_duplicate_ngram_char_fraction.is_empty() {
        return None;
    }
    let normalized = normalized();
    // Each distinct word as a small integer, so that the n-gram tables below hash and compare
    // a few integers instead of n strings (exact: equal ids are equal words).
    let spans = crate::curate::near_dup::word_spans(normalized);
    let mut ids: FastMap<&str, u32> =
        FastMap::with_capacity_and_hasher(spans.len() / 2, Default::default());
    let mut lens: Vec<usize> = Vec::with_capacity(spans.len());
    let words: Vec<u32> = spans
        .iter()
        .map(|&(start, end)| {
            let w = &normalized[start..end];
            let next = ids.len() as u32;
            let id = *ids.entry(w).or_insert(next);
            lens.push(if w.is_ascii() {
                w.len()
            } else {
                w.chars().count()
            });
            id
        })
        .collect();
    let total: usize = lens.iter().sum();
    if total == 0 {
        return None;
    }
    // Every measure first (one pass per n-gram length), then the rules in their order.
    let (top, dup) = ngram_measures(
        &words,
        &lens,
        r.max_top_ngram_char_fraction.keys().copied(),
        r.max_duplicate_ngram_char_fraction.keys().copied(),
    );
    for (&n, &max) in &r.max_top_ngram_char_fraction {
        let chars = top[&n];
        if let Some(d) = over(
            &format!("top {n}-gram character fraction"),
            chars as f64 / total as f64,
            Some(max),
        ) {
            return Some(d);
        }
    }
    for (&n, &max) in &r.max_duplicate_ngram_char_fraction {
        let chars = dup[&n];
        if let Some(d) = over(
            &format!("duplicate {n}-gram character fraction"),
            chars as f64 / total as f64,
            Some(max),
        ) {
            return Some(d);
        }
    }
    None
}

/// For each `n` of `top`: [`top_ngram_chars`]; of `dup`: [`duplicate_ngram_chars`].
///
/// The n-grams of every length get small integer ids, level by level: the (n+1)-gram at `i` is
/// the pair of n-grams at `i` and `i + 1`, so one table lookup of two ids numbers it, and it is
/// new without a lookup when either n-gram occurs once. Equal ids are equal n-grams (exact),
/// and a text costs about one lookup per word and level for its repeated parts only.
fn ngram_measures(
    words: &[u32],
    lens: &[usize],
    top: impl Iterator<Item = usize>,
    dup: impl Iterator<Item = usize>,
) -> (BTreeMap<usize, usize>, BTreeMap<usize, usize>) {
    let mut top: BTreeMap<usize, usize> = top.map(|n| (n, 0)).collect();
    let mut dup: BTreeMap<usize, usize> = dup.map(|n| (n, 0)).collect();
    let max_n = top.keys().chain(dup.keys()).copied().max().unwrap_or(0);
    // chars[i..j] = prefix[j] - prefix[i].
    let mut prefix = Vec::with_capacity(lens.len() + 1);
    prefix.push(0);
    for &l in lens {
        prefix.push(prefix.last().copied().unwrap_or(0) + l);
    }
    let mut ids: Vec<u32> = words.to_vec();
    let mut counts = vec![0u32; ids.iter().map(|&w| w as usize + 1).max().unwrap_or(0)];
    for &w in &ids {
        counts[w as usize] += 1;
    }
    let mut pairs: FastMap<u64, u32> = FastMap::default();
    let mut seen: Vec<bool> = Vec::new();
    for n in 1..=max_n {
        if ids.is_empty() {
            break;
        }
        let chars = |i: usize| prefix[i + n] - prefix[i];
        if let Some(v) = top.get_mut(&n) {
            // The most frequent repeated n-gram (ties: the one with the most characters).
            *v = (0..ids.len())
                .filter(|&i| counts[ids[i] as usize] > 1)
                .map(|i| (counts[ids[i] as usize] as usize, chars(i)))
                .max()
                .map_or(0, |(count, chars)| count * chars);
        }
        if let Some(v) = dup.get_mut(&n) {
            seen.clear();
            seen.resize(counts.len(), false);
            let (mut repeated, mut i) = (0, 0);
            while i < ids.len() {
                let id = ids[i] as usize;
                if seen[id] {
                    repeated += chars(i);
                    i += n;
                } else {
                    seen[id] = true;
                    i += 1;
                }
            }
            *v = repeated;
        }
        if n == max_n {
            break;
        }
        // The next level's ids, numbered densely from 0.
        pairs.clear();
        let mut fresh = 0u32;
        let mut next = Vec::with_capacity(ids.len().saturating_sub(1));
        for w in ids.windows(2) {
            let (x, y) = (w[0], w[1]);
            let id = if counts[x as usize] == 1 || counts[y as usize] == 1 {
                fresh += 1;
                fresh - 1
            } else {
                match pairs.entry((u64::from(x) << 32) | u64::from(y)) {
                    std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        fresh += 1;
                        *e.insert(fresh - 1)
                    }
                }
            };
            next.push(id);
        }
        counts.clear();
        counts.resize(fresh as usize, 0);
        for &id in &next {
            counts[id as usize] += 1;
        }
        ids = next;
    }
    (top, dup)
}

/// In-memory tables of one row's words and n-grams (never persisted, so any hasher will do; the
/// results do not depend on it).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// (items repeating an earlier item, their characters, all characters).
fn duplicates(items: &[&str]) -> (usize, usize, usize) {
    let mut seen: HashSet<&str, foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(items.len(), Default::default());
    let (mut dup, mut dup_chars, mut chars) = (0, 0, 0);
    for item in items {
        let n = item.chars().count();
        chars += n;
        if !seen.insert(*item) {
            dup += 1;
            dup_chars += n;
        }
    }
    (dup, dup_chars, chars)
}

/// The lines of `text` (split at `\n`), trimmed.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', text.as_bytes())
        .chain(std::iter::once(text.len()))
        .map(move |end| {
            let line = &text[start..end];
            start = end + 1;
            line.trim()
        })
}

/// Whether `s` holds a letter or digit (any script).
fn has_alphanumeric(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_alphanumeric())
        || (!s.is_ascii() && s.chars().any(char::is_alphanumeric))
}

/// Runs of lines separated by blank lines, lines trimmed and joined by `\n`; paragraphs without
/// a letter or digit are left out. A paragraph whose lines need no trimming inside it is the
/// text's own slice (most are), others are joined anew.
fn paragraphs(text: &str) -> Vec<std::borrow::Cow<'_, str>> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut finish = |current: &mut Vec<&str>| {
        if current.iter().any(|l| has_alphanumeric(l)) {
            // The trimmed lines are slices of `text`: the paragraph is the slice from the first
            // to the last when only `\n`s lie between them.
            let (first, last) = (current[0], current[current.len() - 1]);
            let start = first.as_ptr() as usize - text.as_ptr() as usize;
            let end = last.as_ptr() as usize - text.as_ptr() as usize + last.len();
            let slice = &text[start..end];
            let joined_len = current.iter().map(|l| l.len()).sum::<usize>() + current.len() - 1;
            out.push(if slice.len() == joined_len {
                std::borrow::Cow::Borrowed(slice)
            } else {
                std::borrow::Cow::Owned(current.join("\n"))
            });
        }
        current.clear();
    };
    for line in lines(text) {
        if line.is_empty() {
            finish(&mut current);
        } else {
            current.push(line);
        }
    }
    finish(&mut current);
    out
}

/// Characters of the most frequent n-gram times its count, when it occurs more than once (ties:
/// the one with the most characters). The definition [`ngram_measures`] computes faster.
#[cfg(test)]
fn top_ngram_chars(words: &[u32], lens: &[usize], n: usize) -> usize {
    if n == 0 || words.len() < n {
        return 0;
    }
    let mut counts: FastMap<&[u32], (usize, usize)> = FastMap::default();
    for i in 0..=words.len() - n {
        let chars: usize = lens[i..i + n].iter().sum();
        counts.entry(&words[i..i + n]).or_insert((0, chars)).0 += 1;
    }
    counts
        .values()
        .filter(|(count, _)| *count > 1)
        .max_by_key(|&&(count, chars)| (count, chars))
        .map_or(0, |&(count, chars)| count * chars)
}

/// Characters of n-grams repeating an earlier n-gram, scanning left to right and skipping the n
/// words of each repeat (datatrove's `find_all_duplicate`). The definition [`ngram_measures`]
/// computes faster.
#[cfg(test)]
fn duplicate_ngram_chars(words: &[u32], lens: &[usize], n: usize) -> usize {
    if n == 0 || words.len() < n {
        return 0;
    }
    let mut seen: HashSet<&[u32], foldhash::fast::RandomState> = Default::default();
    let (mut repeated, mut i) = (0, 0);
    while i + n <= words.len() {
        let gram = &words[i..i + n];
        if seen.contains(gram) {
            repeated += lens[i..i + n].iter().sum::<usize>();
            i += n;
        } else {
            seen.insert(gram);
            i += 1;
        }
    }
    repeated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_paragraphs_follow_their_definition() {
        let pieces = [
            "a", "b c", " ", "\t", "\r", "\n", "\n\n", "{", "é", "1", "  x  ",
        ];
        let mut rng = crate::curate::Lcg(11);
        for _ in 0..3000 {
            let mut text = String::new();
            for _ in 0..rng.below(13) {
                text.push_str(pieces[rng.below(pieces.len() as u64) as usize]);
            }
            let plain_lines: Vec<&str> = text.split('\n').map(str::trim).collect();
            assert_eq!(lines(&text).collect::<Vec<_>>(), plain_lines, "{text:?}");
            let mut plain = Vec::new();
            let mut current: Vec<&str> = Vec::new();
            for line in plain_lines.iter().copied().chain(std::iter::once("")) {
                if line.is_empty() {
                    if current.iter().any(|l| l.chars().any(char::is_alphanumeric)) {
                        plain.push(current.join("\n"));
                    }
                    current.clear();
                } else {
                    current.push(line);
                }
            }
            let ours: Vec<String> = paragraphs(&text)
                .into_iter()
                .map(|p| p.into_owned())
                .collect();
            assert_eq!(ours, plain, "{text:?}");
        }
    }

    #[test]
    fn repetition_measures() {
        // Word ids of "a b c a b c a b".
        let w: Vec<u32> = vec![0, 1, 2, 0, 1, 2, 0, 1];
        let lens = vec![1; w.len()];
        // "a b" occurs 3 times: 2 chars × 3.
        assert_eq!(top_ngram_chars(&w, &lens, 2), 6);
        // 3-grams: abc bca cab abc(repeat: +3, skip to index 6) "a b" too short.
        assert_eq!(duplicate_ngram_chars(&w, &lens, 3), 3);
        assert_eq!(top_ngram_chars(&w, &lens, 9), 0);
        assert_eq!(duplicates(&["x", "yy", "x", "yy", "z"]), (2, 3, 7));
        // The level-by-level ids give the definitions' values, on texts with many repeats.
        let mut rng = crate::curate::Lcg(12345);
        let mut next = |m: u64| rng.below(m);
        for round in 0..300 {
            let len = next(120) as usize;
            let vocab = 1 + next(if round % 3 == 0 { 3 } else { 40 });
            let w: Vec<u32> = (0..len).map(|_| next(vocab) as u32).collect();
            let lens: Vec<usize> = w.iter().map(|&x| 1 + x as usize % 7).collect();
            let ns = 1..=12usize;
            let (top, dup) = ngram_measures(&w, &lens, ns.clone(), ns.clone());
            for n in ns {
                assert_eq!(top[&n], top_ngram_chars(&w, &lens, n), "top {n} {w:?}");
                assert_eq!(
                    dup[&n],
                    duplicate_ngram_chars(&w, &lens, n),
                    "dup {n} {w:?}"
                );
            }
        }
        assert_eq!(
            paragraphs("p1 l1\np1 l2\n\n\n  \np2\n\n}\n"),
            ["p1 l1\np1 l2", "p2"]
        );
    }
}
