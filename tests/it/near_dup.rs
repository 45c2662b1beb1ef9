//! Near-duplicate detection at its default settings against exact Jaccard similarity.
//!
//! A generated corpus of base documents, each with one planted variant (words replaced at
//! random positions, a few inserted or deleted), so every related pair sits alone in its group.
//! The test computes each pair's Jaccard similarity exactly on 5-word shingle sets with its own
//! code, then checks what `MinHasher` + `NearDupIndex` grouped: recall ≥ 0.95 for pairs at
//! J ≥ 0.85, and at most 1% of the pairs below 0.5 grouped. Unrelated documents must stay apart.
//!
//! `cargo test --test near_dup -- --nocapture` prints the measured rates per similarity bucket.

use chatshards::conversation::{Conversation, Message};
use chatshards::curate::near_dup::{MinHasher, NearDupConfig, NearDupIndex};
use std::collections::HashSet;

/// splitmix64: a fixed, dependency-free generator, so the corpus is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Words already in normalized form (lowercase ASCII letters and digits), so the library's
/// normalization leaves the text as it is and the shingles below are the library's.
fn word(rng: &mut Rng) -> String {
    format!("w{}", rng.below(50_000))
}

fn shingles(words: &[String], n: usize) -> HashSet<String> {
    if words.len() < n {
        return HashSet::from([words.join(" ")]);
    }
    words.windows(n).map(|w| w.join(" ")).collect()
}

fn jaccard(a: &[String], b: &[String]) -> f64 {
    let (a, b) = (shingles(a, 5), shingles(b, 5));
    let inter = a.intersection(&b).count();
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// A variant of `base` with `edits` random edits: mostly replacements, some insertions and
/// deletions.
fn variant(rng: &mut Rng, base: &[String], edits: usize) -> Vec<String> {
    let mut v = base.to_vec();
    for _ in 0..edits {
        let at = rng.below(v.len() as u64) as usize;
        match rng.below(10) {
            0 => v.insert(at, word(rng)),
            1 if v.len() > 10 => {
                v.remove(at);
            }
            _ => v[at] = word(rng),
        }
    }
    v
}

fn conversation(words: &[String]) -> Conversation {
    // Split between a user and an assistant turn: scope `all` joins them with "\n", which
    // normalizes to one space, so the word sequence is unchanged.
    let cut = words.len() / 3;
    Conversation {
        messages: vec![
            Message::user(words[..cut].join(" ")),
            Message::assistant(words[cut..].join(" ")),
        ],
        tools: vec![],
    }
}

#[test]
fn recall_and_false_positives_against_exact_jaccard() {
    let config = NearDupConfig::default();
    assert_eq!((config.bands, config.rows), (22, 12));
    let hasher = MinHasher::new(&config);
    let mut rng = Rng(2026);

    let mut docs: Vec<Vec<String>> = Vec::new();
    let mut pairs: Vec<(u32, u32, f64)> = Vec::new();
    for i in 0..1600 {
        let len = 60 + rng.below(240) as usize;
        let base: Vec<String> = (0..len).map(|_| word(&mut rng)).collect();
        // Edits per shingle-set size: spread the similarities over 0.2..1.
        let max_edits = (len / 6).max(1) as u64;
        let edits = match i % 4 {
            0 | 1 => rng.below((len / 40).max(1) as u64 + 1) as usize, // mostly J ≥ 0.85
            _ => 1 + rng.below(max_edits) as usize,
        };
        let v = variant(&mut rng, &base, edits);
        let j = jaccard(&base, &v);
        let a = docs.len() as u32;
        docs.push(base);
        docs.push(v);
        pairs.push((a, a + 1, j));
    }

    // Insert in reverse order: the grouping must not depend on it.
    let mut index = NearDupIndex::new(config.bands);
    for (row, doc) in docs.iter().enumerate().rev() {
        let bands = hasher.bands(&conversation(doc)).expect("has shingles");
        index.insert(row as u32, &bands);
    }
    let survivors = index.survivors(docs.len() as u32);

    // Unrelated documents never join a group: each survivor is the base of its own pair.
    for (row, &s) in survivors.iter().enumerate() {
        assert!(
            s as usize == row || s as usize + 1 == row && row % 2 == 1,
            "row {row} → {s}"
        );
    }

    let buckets = [0.0, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 1.01];
    let mut stats = vec![(0usize, 0usize); buckets.len() - 1];
    let (mut high, mut high_found, mut low, mut low_found) = (0, 0, 0, 0);
    for &(a, b, j) in &pairs {
        let grouped = survivors[b as usize] == a;
        let k = buckets
            .windows(2)
            .position(|w| j >= w[0] && j < w[1])
            .expect("bucket");
        stats[k].0 += 1;
        stats[k].1 += grouped as usize;
        if j >= 0.85 {
            high += 1;
            high_found += grouped as usize;
        }
        if j < 0.5 {
            low += 1;
            low_found += grouped as usize;
        }
    }
    println!("Jaccard bucket: pairs, grouped, rate (theory at the bucket's lower edge)");
    for (k, &(n, found)) in stats.iter().enumerate() {
        if n > 0 {
            println!(
                "  [{:.2}, {:.2}): {n:4} {found:4} {:.3} ({:.3})",
                buckets[k],
                buckets[k + 1].min(1.0),
                found as f64 / n as f64,
                config.candidate_probability(buckets[k])
            );
        }
    }
    let recall = high_found as f64 / high as f64;
    let false_rate = low_found as f64 / low as f64;
    println!("J >= 0.85: {high_found}/{high} grouped (recall {recall:.4})");
    println!("J < 0.5: {low_found}/{low} grouped ({false_rate:.4})");
    assert!(
        high >= 500 && low >= 300,
        "corpus shape: {high} high, {low} low"
    );
    assert!(recall >= 0.95, "recall {recall}");
    assert!(false_rate <= 0.01, "false positive rate {false_rate}");
}

#[test]
fn signatures_estimate_jaccard_without_bias() {
    // The share of equal signature values estimates J, unbiased with variance J(1 - J)/k for
    // min-wise independent permutations: a check of the 32-bit hashing scheme itself.
    let config = NearDupConfig::default();
    let hasher = MinHasher::new(&config);
    let k = (config.bands * config.rows) as f64;
    let mut rng = Rng(99);
    let (mut bias, mut z2, mut n) = (0.0, 0.0, 0.0);
    for i in 0..600 {
        let len = 80 + rng.below(200) as usize;
        let base: Vec<String> = (0..len).map(|_| word(&mut rng)).collect();
        let v = variant(&mut rng, &base, 1 + i % 40);
        let j = jaccard(&base, &v);
        let sig = |w: &[String]| hasher.signature(&w.join(" ")).expect("signature");
        let (a, b) = (sig(&base), sig(&v));
        let estimate = a.iter().zip(&b).filter(|(x, y)| x == y).count() as f64 / k;
        bias += estimate - j;
        let var = (j * (1.0 - j) / k).max(1e-9);
        z2 += (estimate - j).powi(2) / var;
        n += 1.0;
    }
    let (bias, chi) = (bias / n, z2 / n);
    println!("mean estimate - J: {bias:+.4}; mean squared z: {chi:.3} (1 for ideal MinHash)");
    assert!(bias.abs() < 0.005, "bias {bias}");
    assert!((0.7..1.3).contains(&chi), "variance ratio {chi}");
}

#[test]
fn defaults_imply_the_documented_threshold() {
    let c = NearDupConfig::default();
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    assert_eq!(round(c.threshold()), 0.773);
    assert_eq!(round(c.candidate_probability(0.85)), 0.966);
    assert_eq!(round(c.candidate_probability(0.9)), 0.999);
    assert_eq!(round(c.candidate_probability(0.5)), 0.005);
    // Per-row state: one u64 per band.
    assert!(c.bands * 8 <= 200);
}

/// Cost figures, not a timed test: `cargo test --test near_dup cost -- --ignored --nocapture`
/// (numbers mean something only with the crate optimized).
#[cfg(target_os = "linux")]
#[test]
#[ignore]
fn cost() {
    let config = NearDupConfig::default();
    let hasher = MinHasher::new(&config);
    let mut rng = Rng(7);
    let texts: Vec<String> = (0..2000)
        .map(|_| {
            (0..300)
                .map(|_| word(&mut rng))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let start = thread_cpu_ns();
    let mut sink = 0u64;
    for t in &texts {
        sink ^= hasher.bands_of_text(t).expect("bands")[0];
    }
    let per = (thread_cpu_ns() - start) as f64 / (texts.len() * 296) as f64;
    let start = thread_cpu_ns();
    for t in &texts {
        sink ^= chatshards::curate::text::normalize(t).len() as u64;
    }
    let norm = (thread_cpu_ns() - start) as f64 / (texts.len() * 296) as f64;
    println!("of which normalize: {norm:.0} ns per shingle");
    println!(
        "bands_of_text: {per:.0} ns per 5-word shingle (300-word texts, 264 permutations) [{sink}]"
    );

    let rows = 913_786u32;
    let mut index = NearDupIndex::with_rows(config.bands, rows);
    for row in 0..rows {
        let b: Vec<u64> = (0..config.bands).map(|_| rng.next()).collect();
        index.insert(row, &b);
    }
    println!(
        "index: {:.1} bytes per row at {rows} rows",
        index.heap_bytes() as f64 / rows as f64
    );
    let start = thread_cpu_ns();
    let survivors = index.survivors(rows);
    println!(
        "survivors over {rows} rows: {:.2} s CPU (transient: 4 B parent + 16 B per row for one band)",
        (thread_cpu_ns() - start) as f64 / 1e9
    );
    assert_eq!(survivors.len(), rows as usize);
}

#[cfg(target_os = "linux")]
/// CPU time of this thread: the machine may be busy, wall time would measure that.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
