//! `chatshards vocab DIR --draft-size N`: the draft vocabulary mapping from the dataset's
//! supervised token frequencies, built exactly as speculators'
//! `build_vocab_mappings_from_distribution` builds it, written beside the dataset under the
//! names the trainers read today: `d2t-N.npy` / `t2d-N.npy` (what `speculators train
//! --draft-vocab-size N` caches and loads) and `vocab_mapping-N.pt` (SpecForge). The files are
//! recorded as derived ([`crate::write::derived`]), so the next build into the directory
//! replaces them with the dataset instead of refusing the directory.

use crate::printer::Printer;
use crate::report::files::TOKEN_FREQ;
use crate::report::token_freq;
use crate::write::derived;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub struct VocabArgs {
    pub dir: PathBuf,
    pub draft_size: usize,
    /// The target model's vocabulary size (its config's `vocab_size`, which may be padded past
    /// the tokenizer's); default: the tokenizer's, from stats.json.
    pub target_vocab_size: Option<usize>,
    /// Where to write; default `DIR` itself, where the trainers look.
    pub out: Option<PathBuf>,
}

/// speculators' mapping: the `draft` most frequent ids (count descending, then id ascending),
/// topped up with the smallest ids not yet chosen when fewer ids occur, sorted. `d2t[i]` is
/// `selected[i] - i`; `t2d[id]` is whether `id` is in the draft vocabulary.
pub fn build_mapping(
    freq: &BTreeMap<u64, u64>,
    draft: usize,
    target: usize,
) -> Result<(Vec<i64>, Vec<bool>)> {
    let mut sorted: Vec<(u64, u64)> = freq.iter().map(|(&id, &c)| (id, c)).collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut selected: Vec<u64> = sorted.iter().take(draft).map(|&(id, _)| id).collect();
    if selected.len() < draft {
        let chosen: std::collections::HashSet<u64> = selected.iter().copied().collect();
        for id in 0..draft as u64 {
            if selected.len() >= draft {
                break;
            }
            if !chosen.contains(&id) {
                selected.push(id);
            }
        }
    }
    selected.sort_unstable();
    let mut t2d = vec![false; target];
    for &id in &selected {
        let slot = usize::try_from(id)
            .ok()
            .and_then(|i| t2d.get_mut(i))
            .with_context(|| {
                format!("token id {id} is outside the target vocabulary of {target} ids: pass the model's --target-vocab-size")
            })?;
        *slot = true;
    }
    let d2t = selected
        .iter()
        .enumerate()
        .map(|(i, &id)| id as i64 - i as i64)
        .collect();
    Ok((d2t, t2d))
}

/// `np.save` of a 1-D array (format 1.0, header padded as numpy pads it).
pub fn npy(descr: &str, len: usize, data: &[u8]) -> Vec<u8> {
    // numpy leaves room for the shape to grow to 21 digits, then pads to 64 bytes with a '\n'.
    let shape = format!("({len},)");
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    header.push_str(&" ".repeat(21usize.saturating_sub(len.to_string().len())));
    let hlen = header.len() + 1;
    let pad = 64 - (10 + hlen) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// The file names of a draft vocabulary of `draft` ids: speculators' (`d2t-N.npy`, `t2d-N.npy`,
/// which `speculators train --draft-vocab-size N` loads from the data directory since its
/// PR #1081) and SpecForge's (`torch.save({"d2t", "t2d"})`, for its `vocab_mapping_path`).
pub fn file_names(draft: usize) -> [String; 3] {
    [
        format!("d2t-{draft}.npy"),
        format!("t2d-{draft}.npy"),
        format!("vocab_mapping-{draft}.pt"),
    ]
}

/// The three files' bytes: `np.save` of d2t (`<i8`) and t2d (`|b1`) as speculators'
/// `train.py` saves them, and the SpecForge `.pt` with the same tensors (int64 and bool, the
/// dtypes of its `process_token_dict_to_mappings`).
pub fn mapping_files(d2t: &[i64], t2d: &[bool]) -> Result<[(String, Vec<u8>); 3]> {
    let d2t_bytes: Vec<u8> = d2t.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t2d_bytes: Vec<u8> = t2d.iter().map(|&b| u8::from(b)).collect();
    let [d2t_name, t2d_name, pt_name] = file_names(d2t.len());
    let pickle = token_freq::pickle_tensor_dict(&[
        (
            "d2t",
            token_freq::Tensor1d {
                storage: "LongStorage",
                len: d2t.len(),
            },
        ),
        (
            "t2d",
            token_freq::Tensor1d {
                storage: "BoolStorage",
                len: t2d.len(),
            },
        ),
    ]);
    let folder = pt_name.trim_end_matches(".pt");
    let pt = token_freq::torch_zip(folder, &pickle, &[&d2t_bytes, &t2d_bytes])?;
    Ok([
        (d2t_name, npy("<i8", d2t.len(), &d2t_bytes)),
        (t2d_name, npy("|b1", t2d.len(), &t2d_bytes)),
        (pt_name, pt),
    ])
}

pub fn run(args: &VocabArgs, printer: &Printer) -> Result<()> {
    if args.draft_size == 0 {
        bail!("--draft-size must be at least 1");
    }
    let path = args.dir.join(TOKEN_FREQ);
    if !path.exists() {
        bail!(
            "`{}` not found: build the dataset with this version of chatshards (it writes {TOKEN_FREQ})",
            path.display()
        );
    }
    let freq = token_freq::read_pt(&path)?;
    let target = match args.target_vocab_size {
        Some(n) => n,
        None => {
            let (_, stats) = crate::report::files::load(&args.dir)?;
            let stats = stats.with_context(|| {
                format!(
                    "no stats.json in `{}`: pass --target-vocab-size",
                    args.dir.display()
                )
            })?;
            let n = usize::try_from(stats.vocab_size).context("vocab_size out of range")?;
            printer.info(&format!(
                "target vocabulary: {n} ids (the tokenizer's); pass --target-vocab-size if the model's config pads it (Qwen3.6: 248320)"
            ));
            n
        }
    };
    if args.draft_size > target {
        bail!(
            "--draft-size {} is larger than the target vocabulary ({target})",
            args.draft_size
        );
    }
    let (d2t, t2d) = build_mapping(&freq, args.draft_size, target)?;
    let out = args.out.clone().unwrap_or_else(|| args.dir.clone());
    let files = mapping_files(&d2t, &t2d)?;
    derived::write(&out, &files)?;
    let covered: u64 = t2d
        .iter()
        .enumerate()
        .filter(|(_, &b)| b)
        .filter_map(|(id, _)| freq.get(&(id as u64)))
        .sum();
    let all: u64 = freq.values().sum();
    let [d2t_name, t2d_name, pt_name] = file_names(args.draft_size);
    printer.info(&format!(
        "wrote {d2t_name} ({} ids), {t2d_name} ({target} ids) and {pt_name} to `{}`: the draft vocabulary covers {covered} of {all} supervised tokens ({:.2}%) from {} distinct ids seen\n  speculators: `speculators train --data-path {} --draft-vocab-size {}` loads the .npy files\n  SpecForge: set the model's `vocab_mapping_path` to `{}`",
        d2t.len(),
        out.display(),
        if all == 0 { 100.0 } else { covered as f64 * 100.0 / all as f64 },
        freq.len(),
        out.display(),
        args.draft_size,
        out.join(&pt_name).display(),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_takes_the_most_frequent_ids_then_tops_up_with_small_ids() {
        let freq = BTreeMap::from([(7, 5), (3, 5), (9, 1), (2, 8)]);
        let (d2t, t2d) = build_mapping(&freq, 3, 12).expect("map");
        // Chosen 2 (8), 3 and 7 (5 each, id order); sorted [2, 3, 7].
        assert_eq!(d2t, vec![2, 2, 5]);
        assert_eq!(
            t2d.iter().positions(),
            vec![2, 3, 7],
            "t2d marks the chosen ids"
        );
        let (d2t, _) = build_mapping(&freq, 6, 12).expect("map");
        // All four seen, then 0 and 1: [0, 1, 2, 3, 7, 9].
        assert_eq!(d2t, vec![0, 0, 0, 0, 3, 4]);
        assert!(build_mapping(&freq, 3, 5).is_err());
    }

    trait Positions {
        fn positions(self) -> Vec<usize>;
    }
    impl<'a, I: Iterator<Item = &'a bool>> Positions for I {
        fn positions(self) -> Vec<usize> {
            self.enumerate()
                .filter(|(_, &b)| b)
                .map(|(i, _)| i)
                .collect()
        }
    }

    #[test]
    fn npy_headers_are_numpy_s() {
        // np.save of np.zeros(3, dtype=np.int64): 128-byte header.
        let bytes = npy("<i8", 3, &[0; 24]);
        assert_eq!(bytes.len(), 128 + 24);
        let start =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }    ";
        assert_eq!(&bytes[..start.len()], start.as_slice());
        assert!(bytes[start.len()..127].iter().all(|&b| b == b' '));
        assert_eq!(bytes[127], b'\n');
    }
}
