//! Language identification for the `language` filter: whatlang 0.18's decisions (language and
//! confidence, bit for bit), computed through an inverted trigram index.
//!
//! whatlang scores a text against each language of its script by walking that language's 300
//! profile trigrams and looking each one up in the text's trigram ranks: about 11,000 hash
//! lookups a row for a Latin-script text, whatever the text. The distance it sums is
//! `Σ over the profile: |rank in text − rank in profile|, or 300 when absent`, which equals
//! `300·300 − Σ over the trigrams both hold: (300 − |rank in text − rank in profile|)`. So this
//! module walks the text's (at most 600) ranked trigrams instead, and adds, for each, the gain of
//! every language whose profile holds it (an inverted index built once from the same profiles,
//! `language/profiles.tsv`, copied from whatlang by `tests/oracle/vendor_whatlang_profiles.py`).
//! Everything else — script detection, alphabet scores, the combined score, the confidence and
//! the tie order of whatlang's unstable sorts — is whatlang's own code or a copy of it on the same
//! inputs in the same order, so decisions are identical; the tests compare with
//! `whatlang::detect` on thousands of texts in every script.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::LazyLock;

use whatlang::dev::{FilterList, LowercaseText};
use whatlang::{Lang, Script};

/// whatlang's constants (`trigrams/mod.rs`).
const MAX_TRIGRAM_DISTANCE: i64 = 300;
const MAX_TOTAL_DISTANCE: i64 = MAX_TRIGRAM_DISTANCE * MAX_TRIGRAM_DISTANCE;
const TEXT_TRIGRAMS_SIZE: usize = 600;

const PROFILES: &str = include_str!("language/profiles.tsv");

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
    fn alphabet_scores(self, text: &LowercaseText) -> (usize, Vec<(Lang, f64)>) {
        let mock = |langs: &[Lang]| (1, langs.iter().map(|&l| (l, 1.0)).collect());
        match self {
            Self::Latin => {
                let o = whatlang::dev::alphabet_latin_calculate_scores(text, &FilterList::All);
                (o.count, o.scores)
            }
            Self::Cyrillic => {
                let o = whatlang::dev::alphabet_cyrillic_calculate_scores(text, &FilterList::All);
                (o.count, o.scores)
            }
            Self::Arabic => mock(&[Lang::Ara, Lang::Urd, Lang::Pes]),
            Self::Devanagari => mock(&[Lang::Hin, Lang::Mar, Lang::Nep]),
            Self::Hebrew => mock(&[Lang::Heb, Lang::Yid]),
        }
    }
}

/// A trigram as three code points packed in 21 bits each: the packing's numeric order is
/// whatlang's derived `Ord` on `Trigram(char, char, char)`.
fn pack(a: char, b: char, c: char) -> u64 {
    ((a as u64) << 42) | ((b as u64) << 21) | c as u64
}

/// One script's languages (in whatlang's profile order) and, for every trigram of their
/// profiles, which languages hold it at which rank.
struct Index {
    langs: Vec<Lang>,
    postings: HashMap<u64, Vec<(u8, u16)>, BuildHasherDefault<MixHasher>>,
}

static INDEXES: LazyLock<Vec<(MultiScript, Index)>> = LazyLock::new(|| {
    MultiScript::ALL
        .iter()
        .map(|&script| (script, build_index(script)))
        .collect()
});

fn build_index(script: MultiScript) -> Index {
    let mut index = Index {
        langs: Vec::new(),
        postings: HashMap::default(),
    };
    for line in PROFILES.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.splitn(3, '\t');
        let (Some(name), Some(code), Some(trigrams)) =
            (fields.next(), fields.next(), fields.next())
        else {
            panic!("profiles.tsv: malformed line {line:?}");
        };
        if name != script.name() {
            continue;
        }
        let lang = Lang::from_code(code).unwrap_or_else(|| panic!("profiles.tsv: {code:?}"));
        let lang_index = u8::try_from(index.langs.len()).expect("fewer than 256 languages");
        index.langs.push(lang);
        let chars: Vec<char> = trigrams.chars().collect();
        assert_eq!(
            chars.len(),
            900,
            "profiles.tsv: {code} has not 300 trigrams"
        );
        for (rank, t) in chars.chunks_exact(3).enumerate() {
            let rank = u16::try_from(rank).expect("300 ranks");
            index
                .postings
                .entry(pack(t[0], t[1], t[2]))
                .or_default()
                .push((lang_index, rank));
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

/// The text's trigrams ranked as whatlang ranks them (`trigrams/utils.rs`): counted over the
/// lowercased text with stop characters as spaces (a space appended, none of the two "space
/// pairs"), sorted by count then trigram, both descending, first 600 kept.
fn ranked_trigrams(
    text: &str,
    counts: &mut HashMap<u64, u32, BuildHasherDefault<MixHasher>>,
) -> Vec<(u32, u64)> {
    counts.clear();
    let mut chars = text
        .chars()
        .map(|c| if is_stop_char(c) { ' ' } else { c })
        .chain(Some(' '));
    let mut c1 = ' ';
    let Some(mut c2) = chars.next() else {
        return Vec::new();
    };
    for c3 in chars {
        if !(c2 == ' ' && (c1 == ' ' || c3 == ' ')) {
            *counts.entry(pack(c1, c2, c3)).or_insert(0) += 1;
        }
        c1 = c2;
        c2 = c3;
    }
    let mut ranked: Vec<(u32, u64)> = counts.iter().map(|(&t, &n)| (n, t)).collect();
    let descending = |a: &(u32, u64), b: &(u32, u64)| b.cmp(a);
    if ranked.len() > TEXT_TRIGRAMS_SIZE {
        ranked.select_nth_unstable_by(TEXT_TRIGRAMS_SIZE - 1, descending);
        ranked.truncate(TEXT_TRIGRAMS_SIZE);
    }
    ranked.sort_unstable_by(descending);
    ranked
}

thread_local! {
    static COUNTS: std::cell::RefCell<HashMap<u64, u32, BuildHasherDefault<MixHasher>>> =
        std::cell::RefCell::new(HashMap::with_capacity_and_hasher(2048, Default::default()));
}

/// whatlang's trigram stage (`trigrams/detection.rs`): each language's score and the number of
/// ranked trigrams, the languages in the order whatlang's unstable sort leaves them.
fn trigram_scores(index: &Index, text: &str) -> (usize, Vec<(Lang, f64)>) {
    let ranked = COUNTS.with(|counts| ranked_trigrams(text, &mut counts.borrow_mut()));
    let mut gains = vec![0i64; index.langs.len()];
    for (position, &(_, trigram)) in ranked.iter().enumerate() {
        let Some(postings) = index.postings.get(&trigram) else {
            continue;
        };
        for &(lang, rank) in postings {
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
    let (alphabet_count, alphabet) = multi.alphabet_scores(&lowercase);
    let (trigram_count, trigram) = trigram_scores(index, &lowercase);

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
            let postings: usize = index.postings.values().map(Vec::len).sum();
            assert_eq!(postings, index.langs.len() * 300, "{script:?}");
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
