//! whatlang 0.18's language detection (language and confidence, bit for bit), computed through
//! an inverted trigram index: [`detect`] gives what `whatlang::detect` gives, in [`Lang`]
//! (whatlang's own type, re-exported). It is the `language` filter's detector in chatshards.
//!
//! whatlang scores a text against each language of its script by walking that language's 300
//! profile trigrams and looking each one up in the text's trigram ranks: about 11,000 hash
//! lookups a row for a Latin-script text, whatever the text. The distance it sums is
//! `Σ over the profile: |rank in text − rank in profile|, or 300 when absent`, which equals
//! `300·300 − Σ over the trigrams both hold: (300 − |rank in text − rank in profile|)`. So this
//! crate walks the text's (at most 600) ranked trigrams instead, and adds, for each, the gain of
//! every language whose profile holds it (an inverted index built once from the same profiles,
//! `src/profiles.tsv`, copied from whatlang by `vendor_whatlang.py` beside this crate's manifest).
//! One pass over the text counts its trigrams and its characters: trigrams of the 27 characters
//! `a`–`z` and space (most of any Latin-script text) in a dense table, the others in a map; the
//! alphabet scores, which depend only on how often each character occurs, come from the same
//! counts and whatlang's alphabets (`src/alphabets.tsv`, copied by the same script).
//! Everything else — script detection, the combined score, the confidence and the tie order of
//! whatlang's unstable sorts — is whatlang's own code or a copy of it on the same inputs in the
//! same order, so decisions are identical; the tests compare with `whatlang::detect` (and the
//! alphabet stage with whatlang's own) on thousands of texts in every script.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::LazyLock;

use whatlang::dev::LowercaseText;
use whatlang::Script;

/// whatlang's language type: [`detect`]'s answers are `whatlang::detect`'s.
pub use whatlang::Lang;

/// whatlang's constants (`trigrams/mod.rs`).
const MAX_TRIGRAM_DISTANCE: i64 = 300;
const MAX_TOTAL_DISTANCE: i64 = MAX_TRIGRAM_DISTANCE * MAX_TRIGRAM_DISTANCE;
const TEXT_TRIGRAMS_SIZE: usize = 600;

const PROFILES: &str = include_str!("profiles.tsv");
const ALPHABETS: &str = include_str!("alphabets.tsv");

/// The scripts whose languages whatlang tells apart by trigrams, in `PROFILES`' spelling.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MultiScript {
    Latin,
    Cyrillic,
    Arabic,
    Devanagari,
    Hebrew,
}

impl MultiScript {
    const ALL: [MultiScript; 5] = [
        Self::Latin,
        Self::Cyrillic,
        Self::Arabic,
        Self::Devanagari,
        Self::Hebrew,
    ];

    fn of(script: Script) -> Option<Self> {
        Some(match script {
            Script::Latin => Self::Latin,
            Script::Cyrillic => Self::Cyrillic,
            Script::Arabic => Self::Arabic,
            Script::Devanagari => Self::Devanagari,
            Script::Hebrew => Self::Hebrew,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Latin => "latin",
            Self::Cyrillic => "cyrillic",
            Self::Arabic => "arabic",
            Self::Devanagari => "devanagari",
            Self::Hebrew => "hebrew",
        }
    }

    /// whatlang's alphabet stage: real alphabets for Latin and Cyrillic, a fixed mock (every
    /// language 1.0, count 1) for the others (`alphabets/detection.rs`).
    fn alphabet_scores(self, index: &Index, counts: &Counts) -> (usize, Vec<(Lang, f64)>) {
        let mock = |langs: &[Lang]| (1, langs.iter().map(|&l| (l, 1.0)).collect());
        match self {
            Self::Latin | Self::Cyrillic => index.alphabet.scores(self.script(), counts),
            Self::Arabic => mock(&[Lang::Ara, Lang::Urd, Lang::Pes]),
            Self::Devanagari => mock(&[Lang::Hin, Lang::Mar, Lang::Nep]),
            Self::Hebrew => mock(&[Lang::Heb, Lang::Yid]),
        }
    }

    fn script(self) -> Script {
        match self {
            Self::Latin => Script::Latin,
            Self::Cyrillic => Script::Cyrillic,
            Self::Arabic => Script::Arabic,
            Self::Devanagari => Script::Devanagari,
            Self::Hebrew => Script::Hebrew,
        }
    }
}

/// A script's alphabets as whatlang inverts them (`alphabets/common.rs`,
/// `build_inverted_map`): every character of any alphabet, sorted, with the languages whose
/// alphabet holds it (once per occurrence in that alphabet, as whatlang pushes them).
#[derive(Default)]
struct Alphabet {
    chars: Vec<char>,
    langs: Vec<Vec<Lang>>,
}

impl Alphabet {
    fn new(script: MultiScript) -> Alphabet {
        let mut map: HashMap<char, Vec<Lang>> = HashMap::new();
        for (lang, alphabet) in table_rows("alphabets.tsv", ALPHABETS, script) {
            for c in alphabet.chars() {
                map.entry(c).or_default().push(lang);
            }
        }
        let mut pairs: Vec<(char, Vec<Lang>)> = map.into_iter().collect();
        pairs.sort_unstable_by_key(|&(c, _)| c);
        let (chars, langs) = pairs.into_iter().unzip();
        Alphabet { chars, langs }
    }

    /// whatlang's `generic_alphabet_calculate_scores` on the text's character counts: every
    /// non-stop character scores 2 for each language whose alphabet holds it, less 1 for all;
    /// the languages in the script's order, sorted by raw score (descending, unstably).
    fn scores(&self, script: Script, counts: &Counts) -> (usize, Vec<(Lang, f64)>) {
        let max_raw_score = counts.letters;
        let script_langs = script.langs();
        let mut lang_scores = vec![0usize; Lang::all().len()];
        let mut common_score = 0usize;
        for (c, langs) in self.chars.iter().zip(&self.langs) {
            let char_score = 2 * counts.of_char(*c) as usize;
            if char_score == 0 {
                continue;
            }
            if langs.len() == script_langs.len() {
                common_score += char_score;
            } else {
                for &lang in langs {
                    lang_scores[lang as usize] += char_score;
                }
            }
        }
        let mut raw: Vec<(Lang, usize)> = script_langs
            .iter()
            .map(|&l| {
                let score = (lang_scores[l as usize] + common_score).saturating_sub(max_raw_score);
                (l, score)
            })
            .collect();
        raw.sort_unstable_by_key(|&(_, score)| std::cmp::Reverse(score));
        let scores = raw
            .into_iter()
            .map(|(l, score)| (l, score as f64 / max_raw_score as f64))
            .collect();
        (max_raw_score, scores)
    }
}

/// A trigram as three code points packed in 21 bits each: the packing's numeric order is
/// whatlang's derived `Ord` on `Trigram(char, char, char)`.
fn pack(a: char, b: char, c: char) -> u64 {
    ((a as u64) << 42) | ((b as u64) << 21) | c as u64
}

/// The characters of dense trigrams: space and `a`–`z`, numbered in code point order.
const DENSE_CHARS: usize = 27;
const DENSE: usize = DENSE_CHARS * DENSE_CHARS * DENSE_CHARS;

/// A character's dense number (space 0, `a`–`z` 1–26), or `None`.
fn dense_code(c: char) -> Option<usize> {
    match c {
        ' ' => Some(0),
        'a'..='z' => Some(c as usize - 'a' as usize + 1),
        _ => None,
    }
}

fn dense_char(code: usize) -> char {
    if code == 0 {
        ' '
    } else {
        char::from(b'a' + (code - 1) as u8)
    }
}

/// A dense trigram's number, or `None` when a character is not dense.
fn dense_index(packed: u64) -> Option<usize> {
    let char_at = |shift: u32| char::from_u32(((packed >> shift) & 0x1F_FFFF) as u32);
    let code = |shift| char_at(shift).and_then(dense_code);
    Some((code(42)? * DENSE_CHARS + code(21)?) * DENSE_CHARS + code(0)?)
}

/// One script's languages (in whatlang's profile order), for every trigram of their profiles
/// which languages hold it at which rank, and the script's alphabets.
struct Index {
    langs: Vec<Lang>,
    /// (language, rank) pairs, grouped by trigram.
    postings: Vec<(u8, u16)>,
    /// A dense trigram's postings as `start << 8 | len` into `postings` (`len` 0: none).
    dense: Vec<u32>,
    /// The other trigrams' postings, the same way.
    sparse: HashMap<u64, u32, BuildHasherDefault<MixHasher>>,
    alphabet: Alphabet,
}

impl Index {
    fn postings(&self, trigram: u64) -> &[(u8, u16)] {
        let slot = match dense_index(trigram) {
            Some(i) => self.dense[i],
            None => self.sparse.get(&trigram).copied().unwrap_or(0),
        };
        let start = (slot >> 8) as usize;
        &self.postings[start..start + (slot & 0xFF) as usize]
    }
}

/// The (language, data) rows of a vendored table (`script`, whatlang's language code, data)
/// for one script, in the table's order. The tables are compiled in: a bad row is a bug.
fn table_rows<'t>(
    name: &'static str,
    table: &'t str,
    script: MultiScript,
) -> impl Iterator<Item = (Lang, &'t str)> {
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |line| {
            let mut fields = line.splitn(3, '\t');
            let (Some(s), Some(code), Some(data)) = (fields.next(), fields.next(), fields.next())
            else {
                panic!("{name}: malformed line {line:?}");
            };
            let lang = Lang::from_code(code).unwrap_or_else(|| panic!("{name}: {code:?}"));
            (s == script.name()).then_some((lang, data))
        })
}

static INDEXES: LazyLock<Vec<(MultiScript, Index)>> = LazyLock::new(|| {
    MultiScript::ALL
        .iter()
        .map(|&script| (script, build_index(script)))
        .collect()
});

fn build_index(script: MultiScript) -> Index {
    let mut langs = Vec::new();
    let mut by_trigram: std::collections::BTreeMap<u64, Vec<(u8, u16)>> = Default::default();
    for (lang, trigrams) in table_rows("profiles.tsv", PROFILES, script) {
        let lang_index = u8::try_from(langs.len()).expect("fewer than 256 languages");
        langs.push(lang);
        let chars: Vec<char> = trigrams.chars().collect();
        assert_eq!(
            chars.len(),
            900,
            "profiles.tsv: {lang:?} has not 300 trigrams"
        );
        for (rank, t) in chars.chunks_exact(3).enumerate() {
            let rank = u16::try_from(rank).expect("300 ranks");
            by_trigram
                .entry(pack(t[0], t[1], t[2]))
                .or_default()
                .push((lang_index, rank));
        }
    }
    let mut index = Index {
        langs,
        postings: Vec::new(),
        dense: vec![0; DENSE],
        sparse: HashMap::default(),
        alphabet: Alphabet::new(script),
    };
    for (trigram, list) in by_trigram {
        let start = u32::try_from(index.postings.len()).expect("postings fit");
        let len = u32::try_from(list.len()).expect("fewer than 256 languages");
        index.postings.extend(list);
        let slot = (start << 8) | len;
        match dense_index(trigram) {
            Some(i) => index.dense[i] = slot,
            None => {
                index.sparse.insert(trigram, slot);
            }
        }
    }
    index
}

/// Multiply-shift hashing of packed trigrams for the in-memory maps (never persisted, and no
/// order depends on it: ranks come from a total sort).
#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        let x = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

/// whatlang's `is_stop_char`: ASCII punctuation, digits and controls count as spaces.
fn is_stop_char(c: char) -> bool {
    matches!(c, '\u{0000}'..='\u{0040}' | '\u{005B}'..='\u{0060}' | '\u{007B}'..='\u{007E}')
}

/// One pass's counts over a lowercased text: its trigrams as whatlang counts them
/// (`trigrams/utils.rs`: stop characters as spaces, a space appended, no trigram centred on a
/// space next to a space) and its non-stop characters (for the alphabet stage).
struct Counts {
    /// Dense trigrams' counts, and which are non-zero (to read and reset them).
    dense: Vec<u32>,
    touched: Vec<u16>,
    sparse: HashMap<u64, u32, BuildHasherDefault<MixHasher>>,
    /// Non-stop characters: how many, ASCII ones by code, the others in a map.
    letters: usize,
    ascii: [u32; 128],
    other: HashMap<char, u32, BuildHasherDefault<MixHasher>>,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            dense: vec![0; DENSE],
            touched: Vec::with_capacity(1024),
            sparse: HashMap::default(),
            letters: 0,
            ascii: [0; 128],
            other: HashMap::default(),
        }
    }

    fn count(&mut self, text: &str) {
        for &i in &self.touched {
            self.dense[usize::from(i)] = 0;
        }
        self.touched.clear();
        self.sparse.clear();
        self.letters = 0;
        self.ascii = [0; 128];
        self.other.clear();
        // The previous two characters and their dense numbers.
        let (mut c1, mut d1) = (' ', Some(0));
        let mut c2: Option<(char, Option<usize>)> = None;
        for raw in text.chars().map(Some).chain(Some(None)) {
            let c3 = match raw {
                Some(c) if is_stop_char(c) => ' ',
                Some(c) => {
                    self.letters += 1;
                    match self.ascii.get_mut(c as usize) {
                        Some(n) => *n += 1,
                        None => *self.other.entry(c).or_insert(0) += 1,
                    }
                    c
                }
                // The appended space.
                None => ' ',
            };
            let d3 = dense_code(c3);
            if let Some((c2, d2)) = c2 {
                if !(c2 == ' ' && (c1 == ' ' || c3 == ' ')) {
                    match (d1, d2, d3) {
                        (Some(a), Some(b), Some(c)) => {
                            let i = (a * DENSE_CHARS + b) * DENSE_CHARS + c;
                            if self.dense[i] == 0 {
                                self.touched.push(i as u16);
                            }
                            self.dense[i] += 1;
                        }
                        _ => *self.sparse.entry(pack(c1, c2, c3)).or_insert(0) += 1,
                    }
                }
                (c1, d1) = (c2, d2);
            }
            if raw.is_none() {
                break;
            }
            c2 = Some((c3, d3));
        }
    }

    /// How often non-stop character `c` occurs.
    fn of_char(&self, c: char) -> u32 {
        match self.ascii.get(c as usize) {
            Some(&n) => n,
            None => self.other.get(&c).copied().unwrap_or(0),
        }
    }

    /// The trigrams ranked as whatlang ranks them: by count then trigram, both descending,
    /// the first 600.
    fn ranked(&self) -> Vec<u64> {
        // Count and trigram in one integer, so that the sort compares one number; all keys
        // differ (the trigrams do), so ascending then reversed is descending.
        let key = |count: u32, trigram: u64| (u128::from(count) << 64) | u128::from(trigram);
        let mut ranked: Vec<u128> = self
            .touched
            .iter()
            .map(|&i| {
                let i = usize::from(i);
                let (a, b, c) = (
                    i / (DENSE_CHARS * DENSE_CHARS),
                    i / DENSE_CHARS % DENSE_CHARS,
                    i % DENSE_CHARS,
                );
                key(
                    self.dense[i],
                    pack(dense_char(a), dense_char(b), dense_char(c)),
                )
            })
            .chain(self.sparse.iter().map(|(&t, &n)| key(n, t)))
            .collect();
        if ranked.len() > TEXT_TRIGRAMS_SIZE {
            let cut = ranked.len() - TEXT_TRIGRAMS_SIZE;
            ranked.select_nth_unstable(cut);
            ranked.drain(..cut);
        }
        ranked.sort_unstable();
        ranked.iter().rev().map(|&k| k as u64).collect()
    }
}

thread_local! {
    static COUNTS: std::cell::RefCell<Counts> = std::cell::RefCell::new(Counts::new());
}

/// whatlang's trigram stage (`trigrams/detection.rs`) on the ranked trigrams: each language's
/// score and the number of ranked trigrams, the languages in the order whatlang's unstable
/// sort leaves them.
fn trigram_scores(index: &Index, ranked: &[u64]) -> (usize, Vec<(Lang, f64)>) {
    let mut gains = vec![0i64; index.langs.len()];
    for (position, &trigram) in ranked.iter().enumerate() {
        for &(lang, rank) in index.postings(trigram) {
            let distance = (position as i64 - i64::from(rank)).abs();
            gains[usize::from(lang)] += MAX_TRIGRAM_DISTANCE - distance;
        }
    }
    let count = ranked.len() as i64;
    let mut distances: Vec<(Lang, u32)> = index
        .langs
        .iter()
        .zip(&gains)
        .map(|(&lang, &gain)| {
            let mut distance = MAX_TOTAL_DISTANCE - gain;
            if MAX_TRIGRAM_DISTANCE > count {
                distance -= (MAX_TRIGRAM_DISTANCE - count) * MAX_TRIGRAM_DISTANCE;
            }
            // In range: at most `count` of the 300 profile trigrams match, each unmatched adds
            // 300, so the correction never goes below 0.
            (lang, distance.clamp(0, MAX_TOTAL_DISTANCE) as u32)
        })
        .collect();
    distances.sort_unstable_by_key(|&(_, d)| d);
    let max_distance = ranked.len() as u32 * MAX_TRIGRAM_DISTANCE as u32;
    let scores = distances
        .into_iter()
        .map(|(lang, d)| (lang, f64::from(max_distance - d) / f64::from(max_distance)))
        .collect();
    (ranked.len(), scores)
}

/// whatlang's `combined::calc_alphabet_weight`.
fn alphabet_weight(count: usize) -> f64 {
    (-(count as f64 / 300.0) + 2.0 / 3.0).clamp(1.0 / 3.0, 2.0 / 3.0)
}

/// whatlang's `core::calculate_confidence`.
fn confidence(highest: f64, second: f64, count: usize) -> f64 {
    if highest == 0.0 {
        return 0.0;
    }
    if second == 0.0 {
        return highest;
    }
    let confident_rate = (3.0 / count as f64) + 0.015;
    let rate = (highest - second) / second;
    if rate > confident_rate {
        1.0
    } else {
        rate / confident_rate
    }
}

/// The language of `text` and whatlang's confidence in it, exactly as `whatlang::detect`
/// gives them; `None` when the text has no letters of any script.
pub fn detect(text: &str) -> Option<(Lang, f64)> {
    let script = whatlang::detect_script(text)?;
    let Some(multi) = MultiScript::of(script) else {
        // One language per script, or Mandarin/Japanese by kana share: no trigram stage, and
        // whatlang's own path is cheap.
        return whatlang::detect(text).map(|info| (info.lang(), info.confidence()));
    };
    let index = &INDEXES
        .iter()
        .find(|(s, _)| *s == multi)
        .expect("an index per multi-language script")
        .1;
    let lowercase = LowercaseText::new(text);
    let ((alphabet_count, alphabet), (trigram_count, trigram)) = COUNTS.with(|counts| {
        let counts = &mut counts.borrow_mut();
        counts.count(&lowercase);
        (
            multi.alphabet_scores(index, counts),
            trigram_scores(index, &counts.ranked()),
        )
    });

    // `combined::raw_detect`: the alphabet's languages in its order, then the trigram stage's
    // others; each scored by the weighted sum; sorted by score, descending, unstably.
    let mut langs: Vec<Lang> = alphabet.iter().map(|&(l, _)| l).collect();
    for &(lang, _) in &trigram {
        if !langs.contains(&lang) {
            langs.push(lang);
        }
    }
    let a_weight = alphabet_weight(alphabet_count);
    let t_weight = 1.0 - a_weight;
    // Each language's scores by its index (0.0 for a language a stage did not score, as
    // whatlang's `find(..).unwrap_or(0.0)`).
    let by_lang = |scores: &[(Lang, f64)]| {
        let mut out = vec![0.0; Lang::all().len()];
        for &(lang, score) in scores {
            out[lang as usize] = score;
        }
        out
    };
    let (a, t) = (by_lang(&alphabet), by_lang(&trigram));
    let mut scores: Vec<(Lang, f64)> = langs
        .into_iter()
        .map(|lang| {
            (
                lang,
                a[lang as usize] * a_weight + t[lang as usize] * t_weight,
            )
        })
        .collect();
    scores.sort_unstable_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Less));

    let mut best = scores.into_iter();
    let (lang, score1) = best.next()?;
    let confidence = match best.next() {
        Some((_, score2)) => confidence(score1, score2, trigram_count),
        None => 1.0,
    };
    Some((lang, confidence))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `detect` against `whatlang::detect`: the same language and the same confidence bits.
    fn assert_same(text: &str) {
        let ours = detect(text);
        let theirs = whatlang::detect(text).map(|i| (i.lang(), i.confidence()));
        assert_eq!(
            ours.map(|(l, c)| (l, c.to_bits())),
            theirs.map(|(l, c)| (l, c.to_bits())),
            "text {text:?}: ours {ours:?}, whatlang {theirs:?}"
        );
    }

    /// A small deterministic generator (splitmix64), so the corpus is the same on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn the_index_holds_every_profile() {
        let langs: usize = INDEXES.iter().map(|(_, i)| i.langs.len()).sum();
        assert_eq!(langs, 51);
        for (script, index) in INDEXES.iter() {
            assert_eq!(index.postings.len(), index.langs.len() * 300, "{script:?}");
            // Every profile trigram is found, dense or not, with its language and rank.
            for line in PROFILES.lines().filter(|l| l.starts_with(script.name())) {
                let code = line.split('\t').nth(1).unwrap_or_default();
                let lang = index.langs.iter().position(|l| l.code() == code);
                let lang = lang.map(|l| l as u8).expect("the language is indexed");
                let chars: Vec<char> = line
                    .rsplit('\t')
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .collect();
                for (rank, t) in chars.chunks_exact(3).enumerate() {
                    let postings = index.postings(pack(t[0], t[1], t[2]));
                    assert!(postings.contains(&(lang, rank as u16)), "{code} {t:?}");
                }
            }
        }
        let latin = &INDEXES[0].1;
        assert!(latin.dense.iter().filter(|&&s| s != 0).count() > 1000);
        assert_eq!(latin.postings(pack('q', 'q', 'q')), &[]);
    }

    /// The alphabet stage from the counts against whatlang's own, on texts of every kind.
    #[test]
    fn alphabet_scores_are_whatlangs() {
        let mut rng = Rng(7);
        let pool: Vec<char> = ALPHABETS
            .lines()
            .filter(|l| !l.starts_with('#'))
            .flat_map(|l| l.rsplit('\t').next().unwrap_or_default().chars())
            .chain(" ,.!?0123456789-_()\n\u{7f}ABZ水".chars())
            .collect();
        for case in 0..2000 {
            let len = [0, 1, 5, 40, 300, 1500][case % 6];
            let text: String = (0..len).map(|_| pool[rng.below(pool.len())]).collect();
            let lowercase = LowercaseText::new(&text);
            let mut counts = Counts::new();
            counts.count(&lowercase);
            for (script, theirs) in [
                (
                    MultiScript::Latin,
                    whatlang::dev::alphabet_latin_calculate_scores(
                        &lowercase,
                        &whatlang::dev::FilterList::All,
                    ),
                ),
                (
                    MultiScript::Cyrillic,
                    whatlang::dev::alphabet_cyrillic_calculate_scores(
                        &lowercase,
                        &whatlang::dev::FilterList::All,
                    ),
                ),
            ] {
                let index = &INDEXES.iter().find(|(s, _)| *s == script).expect("index").1;
                let (count, ours) = script.alphabet_scores(index, &counts);
                let bits = |v: &[(Lang, f64)]| {
                    v.iter().map(|&(l, s)| (l, s.to_bits())).collect::<Vec<_>>()
                };
                assert_eq!(
                    (count, bits(&ours)),
                    (theirs.count, bits(&theirs.scores)),
                    "{script:?} {text:?}"
                );
            }
        }
    }

    #[test]
    fn fixed_texts_in_every_script_decide_as_whatlang() {
        for text in [
            "",
            "   123 ,.;",
            "a",
            "Hello",
            "There is no reason not to learn Esperanto.",
            "Ĉu vi ne volas eklerni Esperanton? Bonvolu! Estas unu de la plej bonaj aferoj!",
            "Además de todo lo anteriormente dicho, también encontramos...",
            "Die Ordnung muss für immer in diesem Codebase bleiben",
            "I am begging pardon",
            "Та нічого, все нормально. А в тебе як?",
            "Мы хотим видеть дальше, чем окна дома напротив",
            "האקדמיה ללשון העברית",
            "דער ייִדישער שרייבער",
            "مرحبا بالعالم، كيف حالك اليوم؟",
            "یہ ایک مثال ہے",
            "नमस्ते दुनिया, आप कैसे हैं?",
            "水",
            "これは日本語の文章です。漢字とひらがな。",
            "这是一个中文句子，用于测试。",
            "안녕하세요 세계",
            "Γειά σου Κόσμε",
            "fn main() { println!(\"hello\"); } // Rust code with English comments",
            "def add(a, b):\n    return a + b\n\nprint(add(1, 2))",
            "Write a Python function that returns the sum of a list. Привет!",
        ] {
            assert_same(text);
        }
    }

    /// Random texts drawn from the profiles themselves (the hardest case: every language's
    /// most frequent trigrams, mixed within and across scripts, at many lengths, with
    /// punctuation, digits and capitals), plus random characters.
    #[test]
    fn random_texts_decide_as_whatlang() {
        let mut rng = Rng(26);
        let profiles: Vec<Vec<char>> = PROFILES
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit('\t').next().unwrap_or_default().chars().collect())
            .collect();
        let noise: Vec<char> = "  ,.!?0123456789-_()[]{}\"'\n\tABCXYZÉÖßşğ水あア한ΩЖщ"
            .chars()
            .collect();
        for case in 0..3000 {
            let mut text = String::new();
            let langs = 1 + rng.below(3);
            let len = [5, 20, 60, 200, 700, 2000][case % 6];
            let picked: Vec<usize> = (0..langs).map(|_| rng.below(profiles.len())).collect();
            while text.chars().count() < len {
                let p = &profiles[picked[rng.below(langs)]];
                // Rank-biased: frequent trigrams more often, like real text.
                let bound = 1 + rng.below(300);
                let rank = rng.below(bound);
                text.extend(&p[rank * 3..rank * 3 + 3]);
                if rng.below(8) == 0 {
                    text.push(noise[rng.below(noise.len())]);
                }
            }
            if case % 7 == 0 {
                text = text.to_uppercase();
            }
            assert_same(&text);
        }
    }
}
